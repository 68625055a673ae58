"""Reading the files a spec names — its includes, haystack files, stack files — one way, whoever reads them.

- Only a regular file is read. A FIFO, socket, device or directory is refused unread and without blocking: the file
  is opened non-blocking and checked on the open descriptor, so a swap after a check cannot slip one in.
- Never more than a cap of bytes, counted on what is read (a device claims size 0 and never ends).
- Only inside the spec's root (`Confinement`): the git work tree that holds the top spec, else the spec's folder, plus
  folders the user allows (`--allow-path`). Symlinks are resolved first. A spec from someone else's repository can
  then read nothing of the machine it runs on beyond what that repository holds.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO

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
    """The folders a spec's files must lie in: its root, and any the user allowed."""

    roots: tuple[str, ...]

    @classmethod
    def of(cls, spec_file: str, allowed: Iterable[str] = ()) -> Confinement:
        extra = []
        for folder in allowed:
            if "\0" in folder or not os.path.isdir(folder):
                raise UserError(f"--allow-path {folder!r}: not a folder")
            extra.append(os.path.realpath(folder))
        return cls((spec_root(spec_file), *extra))

    def problem(self, path: str) -> str | None:
        """Why ``path`` may not be read (None if it may): where it leads, when that is outside every root."""
        if "\0" in path:
            return "holds a NUL byte, which no path can"
        real = os.path.realpath(path)
        if any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in self.roots):
            return None
        shown = "" if real == os.path.abspath(path) else f" (it leads to {real})"
        return (
            f"lies outside the spec's root {self.roots[0]}{shown}: a spec reads only files under its root (the git "
            "work tree that holds it, else its folder); pass --allow-path DIR to allow another folder"
        )

    def check(self, path: str) -> None:
        problem = self.problem(path)
        if problem is not None:
            raise InputRefused(path, problem)
