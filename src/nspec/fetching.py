"""Fetching the data sets' files (`nspec.datasets`) into the cache: pooch downloads each into a temporary file beside
its place, checks its SHA-256 pin and only then moves it there; a git blob pin, which pooch cannot check, is checked
before the file is handed to it. A file that fails its pin is never kept, nor is its partial download. Each file is
fetched and kept on its own: one that fails leaves the others as they are.

A download that stops half-way keeps what came in (``<file>.part``) and the next fetch continues from there with an
HTTP range request. Progress goes out as ``download`` events (`nspec.events`). ``NSPEC_DATA_MIRROR=URL`` fetches
every file from ``URL/<its file name>`` instead of where it is published (an air-gapped machine's mirror, CI's).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nspec.datasets import CATALOG, DataFile, DataSet, DataSetMissing
from nspec.errors import UserError
from nspec.events import Event, Listener, announce

MIRROR = "NSPEC_DATA_MIRROR"
SAY_EVERY = 0.25  # seconds between two progress events of one download
_TIMEOUT = (30, 60)  # seconds: to connect, and between two reads


class FetchFailed(UserError):
    """A file that could not be fetched, or that failed its pin (nothing of it was kept)."""


@dataclass(frozen=True)
class Fetched:
    """What fetching one file did: ``fetched`` now, or ``cached`` already; or ``error`` says why it failed."""

    data: DataSet
    file: DataFile
    outcome: str  # fetched | cached | failed
    error: str = ""


def source(file: DataFile) -> str:
    """Where ``file`` is fetched from: its mirror's copy when `NSPEC_DATA_MIRROR` is set, else its publisher's."""
    mirror = os.environ.get(MIRROR)
    return f"{mirror.rstrip('/')}/{file.name}" if mirror else file.url


def named(names: Iterable[str]) -> list[DataSet]:
    """The data sets ``names`` name (every one when none is); an unknown name is refused, naming the known ones."""
    wanted = list(dict.fromkeys(names)) or list(CATALOG)
    unknown = [n for n in wanted if n not in CATALOG]
    if unknown:
        raise DataSetMissing(f"no data set {unknown[0]!r}; nspec fetches: {', '.join(CATALOG)}")
    return [CATALOG[n] for n in wanted]


def fetch_all(sets: Iterable[DataSet], events: Listener = announce) -> list[Fetched]:
    """Fetch every file of ``sets`` that the cache lacks, each on its own: a failure is recorded and the rest go on."""
    out = []
    for data in sets:
        for file in data.files:
            try:
                out.append(Fetched(data, file, "fetched" if fetch(data, file, events) else "cached"))
            except FetchFailed as exc:
                out.append(Fetched(data, file, "failed", str(exc)))
    return out


def fetch(data: DataSet, file: DataFile, events: Listener = announce) -> bool:
    """Put ``file`` of ``data`` in the cache, checked against its pin; False when it was there already. A file there
    that fails its pin is removed and fetched again."""
    import pooch
    import requests

    target = data.path(file)
    if target.is_file():
        if file.pin.of(target) == file.pin.digest:
            return False
        target.unlink()
    url = source(file)
    known = f"sha256:{file.pin.digest}" if file.pin.kind == "sha256" else None
    pooch.get_logger().setLevel("WARNING")  # what it would say (downloading, a hash to pin) nspec says its own way
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        pooch.retrieve(url, known, file.name, target.parent, downloader=_Resuming(data, file, events))
    except (requests.RequestException, OSError) as exc:
        kept = target.with_name(target.name + ".part")
        more = " (what came in is kept: the same command continues it)" if kept.is_file() else ""
        raise FetchFailed(f"{data.name}: {file.name}: fetching {url} failed: {_reason(exc)}{more}") from None
    except ValueError as exc:  # pooch: the SHA-256 is not the pin (its temporary file is gone)
        raise FetchFailed(f"{data.name}: {file.name}: {url} sent another file ({exc}); nothing was kept") from None
    return True


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


class _Resuming:
    """pooch's downloader: HTTP(S) into ``<file>.part``, continuing what an earlier fetch left there with a range
    request (a server that ignores the range sends the whole file, written anew); ``download`` events as bytes come
    in; a git blob pin checked on the whole file before it goes to pooch."""

    def __init__(self, data: DataSet, file: DataFile, events: Listener) -> None:
        self.data, self.file, self.events = data, file, events

    def __call__(self, url: str, output_file: str, pooch: Any, check_only: bool = False) -> None:
        import requests

        part = self.data.path(self.file).with_name(self.file.name + ".part")
        have = part.stat().st_size if part.is_file() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        if urlsplit(url).scheme not in ("http", "https"):
            raise OSError(f"not an http(s) URL: {url}")
        with requests.get(url, headers=headers, stream=True, timeout=_TIMEOUT) as response:
            if response.status_code == 416:  # the range starts at the end: what is kept is the whole file
                total = have
            else:
                response.raise_for_status()
                if response.status_code != 206:
                    have = 0  # the whole file comes: written anew
                length = response.headers.get("Content-Length")
                total = have + int(length) if length and length.isdigit() else self.file.size or 0
                self._write(response, part, have, total)
        pin = self.file.pin
        if pin.kind == "git-blob" and pin.of(part) != pin.digest:
            found = pin.of(part)
            part.unlink()
            raise ValueError(f"its git blob id is {found}, not the pinned {pin.digest}")
        os.replace(part, output_file)

    def _write(self, response: Any, part: Path, have: int, total: int) -> None:
        said = 0.0
        done = have
        what = f"{self.data.name}/{self.file.name}"
        self.events(Event("download", "data", what, total=total, done=done))
        with open(part, "ab" if have else "wb") as out:
            for chunk in response.iter_content(1 << 16):
                out.write(chunk)
                done += len(chunk)
                now = time.monotonic()
                if now - said >= SAY_EVERY:
                    said = now
                    self.events(Event("download", "data", what, total=total, done=done))
        self.events(Event("download", "data", what, total=total, done=done))
