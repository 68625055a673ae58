"""The exceptions of nspec, all in one tree.

    NspecError                 any failure nspec reports; exit code 1 unless a subclass says otherwise
    └── UserError              bad input: arguments, files, settings (exit 2); the message says what to change
        ├── SpecError          a spec that does not load or validate; carries every issue found, each located
        └── CompileError       a valid spec that cannot be compiled as written (e.g. a cell longer than its model)

The CLI turns these into exit codes in one place (``nspec.cli.main``). Anything else escaping is a bug: the CLI
reports it as an internal error (exit 1).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Location:
    """A place in a source file; line and column count from 1."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a spec: where it is, which key, and what is wrong."""

    location: Location
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.path}: {self.message}" if self.path else f"{self.location}: {self.message}"

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.location.file,
            "line": self.location.line,
            "column": self.location.column,
            "path": self.path,
            "message": self.message,
        }


class NspecError(Exception):
    """Root of every error nspec reports to its user."""

    exit_code = 1


class UserError(NspecError):
    """Bad input from the user; the message says what to change."""

    exit_code = 2


class SpecError(UserError):
    """A spec that does not load or validate; ``issues`` holds every problem found, in file order."""

    def __init__(self, issues: list[SpecIssue]) -> None:
        self.issues = sorted(issues, key=lambda i: (i.location, i.path, i.message))
        super().__init__("\n".join(str(i) for i in self.issues))


class CompileError(UserError):
    """A valid spec that cannot be compiled as written; the message names the cell or setting."""
