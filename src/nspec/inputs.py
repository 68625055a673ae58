"""Reading the files a spec names — its includes, haystack files, stack files — one way, whoever reads them.

- Only a regular file is read. A FIFO, socket, device or directory is refused unread and without blocking: the file
  is opened non-blocking and checked on the open descriptor, so a swap after a check cannot slip one in.
- Never more than a cap of bytes, counted on what is read (a device claims size 0 and never ends).
- Only inside the spec's root (`Confinement`): the git work tree that holds the top spec, else the spec's folder, plus
  folders the user allows (`--allow-path`) and the cache's data sets (`nspec.datasets`, pinned, named `data:...`).
  Symlinks are resolved first. A spec from someone else's repository can then read nothing of the machine it runs
  on beyond what that repository holds, and no message names a path outside the root (whether it exists there is
  nobody's business).
- A pattern of files (`glob_files`) is walked under the root only: a pattern whose fixed part leads outside is refused
  before anything is listed, folders reached through a symbolic link are not entered, and a walk looks at a bounded
  number of folder entries.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO

from nspec.datasets import data_dir
from nspec.errors import UserError


class InputRefused(UserError):
    """A file a spec names that nspec will not read: not a regular file, too large, or outside the spec's root."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(f"{path}: {reason}")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


@contextmanager
def open_regular(path: str) -> Iterator[BinaryIO]:
    """``path`` opened for reading in binary, if it is a regular file; else `InputRefused`, without blocking."""
    if "\0" in path:
        raise InputRefused(path.replace("\0", "\\0"), "holds a NUL byte, which no path can")
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):  # not even opened: opening some devices does something
            raise InputRefused(path, f"is {_kind(mode)}, not a regular file: refused unread")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InputRefused(path, f"cannot be read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # swapped since the check
            raise InputRefused(path, f"is {_kind(mode)}, not a regular file: refused unread")
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield fh


def read_input(path: str, limit: int) -> bytes:
    """The bytes of the regular file ``path``, refused past ``limit`` bytes read."""
    with open_regular(path) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise InputRefused(path, f"is larger than {limit:,} bytes, the most nspec reads from such a file")
    return data


def spec_root(spec_file: str) -> str:
    """The root a spec may read under: the git work tree holding it (a folder with a `.git` entry), else its
    folder. Symlinks resolved."""
    folder = os.path.dirname(os.path.realpath(spec_file))
    here = folder
    while True:
        if os.path.lexists(os.path.join(here, ".git")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return folder
        here = parent


@dataclass(frozen=True)
class Confinement:
    """The folders a spec's files must lie in: its root, any the user allowed, and the cache's data sets."""

    roots: tuple[str, ...]

    @classmethod
    def of(cls, spec_file: str, allowed: Iterable[str] = ()) -> Confinement:
        extra = []
        for folder in allowed:
            if "\0" in folder or not os.path.isdir(folder):
                raise UserError(f"--allow-path {folder!r}: not a folder")
            extra.append(os.path.realpath(folder))
        return cls((spec_root(spec_file), *extra, os.path.realpath(data_dir())))

    def holds(self, real: str) -> bool:
        """Whether the resolved path ``real`` lies in one of the folders."""
        return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in self.roots)

    def problem(self, path: str) -> str | None:
        """Why ``path`` may not be read (None if it may): it leads outside every root. Where it leads is not said."""
        if "\0" in path:
            return "holds a NUL byte, which no path can"
        real = os.path.realpath(path)
        if self.holds(real):
            return None
        return self.outside(through_link=real != os.path.abspath(path))

    def outside(self, through_link: bool = False) -> str:
        """The reason a path outside every root is refused."""
        how = " (through a symbolic link)" if through_link else ""
        return (
            f"lies outside the spec's root {self.roots[0]}{how}: a spec reads only files under its root (the git "
            "work tree that holds it, else its folder); pass --allow-path DIR to allow another folder"
        )

    def check(self, path: str) -> None:
        problem = self.problem(path)
        if problem is not None:
            raise InputRefused(path, problem)


# -- patterns of files --------------------------------------------------------------------------------------------

# The most folder entries the patterns of one haystack may look at together: a pattern over a huge tree (or the
# whole machine) ends in bounded time and memory with an error saying so, instead of walking on.
MAX_GLOB_ENTRIES = 100_000
_MAGIC = re.compile(r"[*?[]")  # what makes a path component a pattern (as `glob` decides)


@dataclass
class Matched:
    """What one pattern matched: its files (sorted; a symbolic link counts as what it leads to, and one leading
    outside the root is listed, for the reader to refuse), how many folders it matched (skipped), or why it was not
    walked (``refused``: the rest of the sentence after the quoted pattern)."""

    pattern: str
    files: list[str] = field(default_factory=list)
    directories: int = 0
    refused: str | None = None


class _Exhausted(Exception):
    pass


class _Budget:
    def __init__(self, limit: int) -> None:
        self.left = limit

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise _Exhausted


def glob_files(
    patterns: Sequence[str], base_dir: str, confinement: Confinement | None, limit: int | None = None
) -> list[Matched]:
    """The files each pattern (`glob` syntax, `**` recursive, hidden names matched only by a pattern starting with
    a dot) matches under ``base_dir``, one `Matched` per pattern, as the strings `glob.glob` gives for
    ``os.path.join(base_dir, pattern)``. The patterns together look at no more than ``limit`` folder entries
    (default `MAX_GLOB_ENTRIES`): the pattern that reaches it is refused, and the ones after it are not walked (nor
    listed)."""
    limit = MAX_GLOB_ENTRIES if limit is None else limit
    budget = _Budget(limit)
    out: list[Matched] = []
    for pattern in patterns:
        start, rest, refused = _anchor(pattern, base_dir, confinement)
        if refused is not None:
            out.append(Matched(pattern, refused=refused))
            continue
        try:
            found = set(_walk(start, rest, budget))
        except _Exhausted:
            out.append(
                Matched(
                    pattern,
                    refused=f"looks at more than {limit:,} folder entries (the most nspec looks "
                    "at for a haystack's patterns): name the files with a narrower pattern",
                )
            )
            break
        matched = Matched(pattern)
        for path in sorted(found):
            if _is_directory(path, confinement):
                matched.directories += 1
            else:
                matched.files.append(path)
        out.append(matched)
    return out


def _anchor(pattern: str, base_dir: str, confinement: Confinement | None) -> tuple[str, list[str], str | None]:
    """Where a pattern's walk starts (its part before the first wildcard, after ``base_dir``), the components
    after it, or why it is refused before anything is listed."""
    if "\0" in pattern:
        return "", [], "holds a NUL byte, which no path can"
    parts = pattern.split("/")
    if any(part.startswith("~") for part in parts):
        why = "has a name starting with ~, which nspec does not expand as a shell does: name the files relative to"
        return "", [], why + " the spec"
    first = next((i for i, part in enumerate(parts) if _MAGIC.search(part)), len(parts))
    if ".." in parts[first:]:
        return "", [], "has .. after a wildcard: put every .. before the first wildcard"
    head = pattern[: len("/".join(parts[:first])) + (first > 0)]
    head = head.rstrip("/") or head  # as os.path.split leaves a folder name; the root stays "/"
    start = os.path.join(base_dir, head if first < len(parts) else pattern)
    if confinement is not None:
        lexical = os.path.normpath(os.path.join(os.path.realpath(base_dir), head))
        if not confinement.holds(lexical):
            return "", [], confinement.outside()
        if not confinement.holds(os.path.realpath(start)):
            return "", [], confinement.outside(through_link=True)
    rest = parts[first:]
    return start, [part for part in rest[:-1] if part] + rest[-1:], None


def _walk(start: str, rest: list[str], budget: _Budget) -> Iterator[str]:
    """Every path matching the components ``rest`` under ``start``, as `glob` spells them, entering only real
    folders (never one reached through a symbolic link). Without ``rest``, ``start`` itself if it exists."""
    if not rest:
        budget.spend()
        if os.path.lexists(start):
            yield start
        return
    todo = [(start, 0)]
    while todo:
        path, k = todo.pop()
        part, last = rest[k], k == len(rest) - 1
        if part == "":  # the pattern ends with a separator: folders only
            yield os.path.join(path, "")
        elif part == "**":  # this folder and every folder under it
            if last:
                yield os.path.join(path, "")
                yield from _tree(path, budget, folders_only=False)
            else:
                todo.append((path, k + 1))
                todo += [(folder, k + 1) for folder in _tree(path, budget, folders_only=True)]
        elif _MAGIC.search(part):
            hidden = part.startswith(".")
            for entry in _entries(path, budget):
                if (hidden or not entry.name.startswith(".")) and fnmatch.fnmatchcase(entry.name, part):
                    if last:
                        yield entry.path
                    elif entry.is_dir(follow_symlinks=False):
                        todo.append((entry.path, k + 1))
        else:
            budget.spend()
            candidate = os.path.join(path, part)
            if last and os.path.lexists(candidate):
                yield candidate
            elif not last and _real_folder(candidate):
                todo.append((candidate, k + 1))


def _tree(top: str, budget: _Budget, folders_only: bool) -> Iterator[str]:
    """Every entry under ``top`` whose name does not start with a dot, at any depth through real folders."""
    todo = [top]
    while todo:
        for entry in _entries(todo.pop(), budget):
            if entry.name.startswith("."):
                continue
            folder = entry.is_dir(follow_symlinks=False)
            if folder:
                todo.append(entry.path)
            if folder or not folders_only:
                yield entry.path


def _entries(folder: str, budget: _Budget) -> Iterator[os.DirEntry[str]]:
    """The entries of ``folder`` (none if it cannot be listed), each counted."""
    try:
        with os.scandir(folder) as listing:
            for entry in listing:
                budget.spend()
                yield entry
    except OSError:
        return


def _real_folder(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_directory(path: str, confinement: Confinement | None) -> bool:
    """Whether a match is a folder (skipped): a real one, or a symbolic link to one inside the root. A link leading
    outside is not looked through: it is listed as a file, for the reader to refuse."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    if stat.S_ISLNK(mode):
        if confinement is not None and confinement.problem(path) is not None:
            return False
        return os.path.isdir(path)
    return stat.S_ISDIR(mode)
