"""The exceptions of nspec, all in one tree.

    NspecError                 any failure nspec reports; exit code 1 unless a subclass says otherwise
    ├── UserError              bad input: arguments, files, settings (exit 2); the message says what to change
    │   ├── SpecError          a spec that does not load or validate; carries every issue found, each located
    │   ├── CompileError       a valid spec that cannot be compiled as written (e.g. a cell longer than its model)
    │   │   └── CellError      a cell that cannot be made at its length (too short for what it holds); compile and
    │   │                      plan say it at `grid.context_lengths`, as validate does (nspec.spec.located_cells)
    │   ├── InputRefused       a file a spec names that nspec will not read (not a regular file, too large, outside
    │   │                      the spec's root; nspec.inputs)
    │   ├── StorageError       a file nspec writes cannot be written: disk full, read-only, no permission
    │   └── Refused            a provider refused a model's calls: fix what the message names and run again
    │       ├── AuthenticationFailed   the key is missing, wrong or revoked (401): names the variable
    │       ├── PermissionDenied       the key may not use this model or endpoint (403)
    │       ├── ModelNotFound          the provider has no such model (404)
    │       └── BadRequest             the provider refused a request as malformed (400, 422)
    ├── ProviderError          a provider call failed in a way that trying again later may fix (exit 3)
    │   ├── RateLimited        429: the provider asked us to wait
    │   ├── ServerError        5xx, overloaded
    │   ├── ConnectionFailed   no response, or a body cut off mid-way
    │   ├── MalformedResponse  a response that is not what the API documents (a gateway's page, a field of the
    │   │                      wrong type, an id of an unsafe shape), named by its endpoint
    │   ├── Gone               404 on a batch or a file: the provider no longer has it (past its retention)
    │   └── StillFailing       `--wait` gave up: the same failure kept coming back, or `--max-wait` passed
    └── RunBusy                another nspec process is working on the run directory (exit 3: run again later)

Storage faults (an OSError such as ENOSPC while writing the run directory) are turned into `StorageError` by
`storage_error`, naming the file; what was recorded before stays, and the same command resumes once fixed.
Providers map their SDK's exceptions into this tree at the boundary (`nspec.runners.providers.guard`), and read
every byte a provider sends as untrusted: what does not parse is a `MalformedResponse` (a control call) or a bad line
of a result file (`nspec.runners.providers.BadLine`), never an exception of Python's own. The runners retry what is
transient and stop on a refusal before making more calls, recording nothing as an answer. A provider's message
never carries a key nspec sent: `Refused` and `ProviderError` redact them (`nspec.secrets`). The CLI
turns these into exit codes in one place (``nspec.cli.main``). Anything else escaping is a bug: the CLI reports it
as an internal error (exit 1).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from nspec.secrets import redact


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


class CellError(CompileError):
    """A cell the spec asks for that cannot be made at its length: its prompt and what it holds do not fit, its
    haystack would repeat against `repeat: error`, or its family cannot build it there. The message names the cell."""


class StorageError(UserError):
    """A file nspec writes cannot be written: the disk is full, the file system read-only, or permission denied.
    Nothing recorded before is lost (results and ledger are written so that a cut-off write is repaired); fix what
    the message says and run the same command again."""


# The OS errors that mean "this storage cannot take the write", with what to do about each.
_STORAGE_FAULTS = {
    errno.ENOSPC: "the disk is full: free some space",
    errno.EDQUOT: "the disk quota is used up: free some space",
    errno.EFBIG: "the file grew past the size this process may write: raise the limit (ulimit -f) or free space",
    errno.EROFS: "the file system is read-only: make it writable, or use -o to write elsewhere",
    errno.EACCES: "permission denied: fix the folder's permissions, or use -o to write elsewhere",
    errno.EPERM: "permission denied: fix the folder's permissions, or use -o to write elsewhere",
    errno.EIO: "the disk refused the write (full, past a file-size limit, or failing): free space or check the disk",
    errno.ENOTDIR: "a part of this path is a file, not a folder: write elsewhere (-o)",
}


def storage_error(exc: OSError) -> StorageError | None:
    """The OS error of a write as a `StorageError` naming its file and what to do, or None if it is another."""
    advice = _STORAGE_FAULTS.get(exc.errno or 0)
    if advice is None:
        return None
    where = exc.filename if exc.filename is not None else "a file in the run directory"
    return StorageError(
        f"cannot write {where}: {exc.strerror or exc} — {advice}; then run the same command again (what was "
        "recorded before is kept)"
    )


@contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """Name ``path`` in storage faults raised inside (a write to an open file does not say which file it was)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno in _STORAGE_FAULTS:
            raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None
        raise


class Refused(UserError):
    """A provider refused a model's calls (not one request's content): nothing more is sent for the model, nothing is
    recorded as an answer, and running the same command again after the fix resumes the run."""

    def __init__(self, provider: str, model: str, message: str, status: int | None = None) -> None:
        self.provider, self.model, self.status = provider, model, status
        super().__init__(redact(message))


class AuthenticationFailed(Refused):
    """The API key is missing, wrong or revoked."""


class PermissionDenied(Refused):
    """The key may not use this model or endpoint."""


class ModelNotFound(Refused):
    """The provider has no model of this name (or the key cannot see it)."""


class BadRequest(Refused):
    """The provider refused a request as malformed: a parameter the model does not take, say."""


class ProviderError(NspecError):
    """A provider call failed in a way that trying again later may fix; runners retry these per the retry policy.
    One that escapes means "run again later" (exit 3)."""

    exit_code = 3
    transient = True

    def __init__(self, provider: str, message: str, status: int | None = None) -> None:
        self.provider, self.status = provider, status
        super().__init__(redact(message))


class RateLimited(ProviderError):
    """429: the provider asked us to wait (``retry_after`` seconds, when it said); ``headers``, the response's, say
    its limits."""

    def __init__(
        self,
        provider: str,
        message: str,
        retry_after: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(provider, message, 429)
        self.retry_after, self.headers = retry_after, headers


class ServerError(ProviderError):
    """A 5xx or an overloaded provider."""


class ConnectionFailed(ProviderError):
    """No response, or a response body cut off mid-way."""


class MalformedResponse(ProviderError):
    """A response that is not what the API documents: a body that is not JSON (a gateway's HTML page, a body cut
    off), a field missing or of the wrong type, an id of a shape nspec will not put in a path or a URL. Tried again
    at the next round, like a connection that failed."""


class Gone(ProviderError):
    """A batch or a file the provider answers 404 for: gone past its retention, or never there. Not a refusal of the
    model: the runner treats the batch's results as missing (sent again) or, for results lost from the results
    file, as ones to send again on request (`--resend-lost`)."""


class StillFailing(ProviderError):
    """`--wait` gave up: the same failure came back round after round (`MAX_IDENTICAL_FAILURES`), or `--max-wait`
    passed. Nothing is lost; running the same command again resumes."""


class BudgetSpent(NspecError):
    """Live calls stopped at the run's budget (`budget.max_usd`, `--max-usd`): what came back is recorded, the rest
    is not sent (exit 4)."""

    exit_code = 4


class RunBusy(NspecError):
    """Another nspec process is submitting, collecting, scoring or reporting in the same run directory. Run again
    once it is done (a cron job simply tries again at its next turn)."""

    exit_code = 3
