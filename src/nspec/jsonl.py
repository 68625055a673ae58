"""JSON Lines, read and written in one place: every line of a run directory's files (cells, request shards, results,
scores) goes through here, streamed a line at a time, encoded the same stable way."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from nspec.errors import UserError, writing


def encode(record: Any) -> bytes:
    """One line, byte-for-byte stable: compact, UTF-8 as is, newline-terminated. orjson encodes a request line of a
    128K-token context several times faster than the standard library (encoding is most of what compiling costs);
    what it does not take (an integer past 64 bits, a key that is not a string) goes to the standard encoder."""
    try:
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def read(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a JSONL file, one at a time (blank lines skipped); nothing when the file does not exist. A
    last line without its newline is one being appended (by another process, or cut off by a crash) and is left
    out; a damaged line elsewhere is an error naming it."""
    if not path.is_file():
        return
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield orjson.loads(line)
            except ValueError:  # not JSON, or not UTF-8
                if not line.endswith(b"\n"):
                    return
                raise UserError(f"{path}:{number}: not a JSON line; the file is damaged") from None


def read_raw(path: Path) -> Iterator[tuple[dict[str, Any], bytes]]:
    """Each record with its line's exact bytes (request shards are re-sent byte for byte)."""
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                yield orjson.loads(line), line


def write(path: Path, records: Iterable[Any]) -> None:
    """Write a JSONL file whole: into a temporary file beside it, then renamed, so it is never seen half-written."""
    part = path.with_name(path.name + ".part")
    try:
        with writing(path), open(part, "wb") as fh:
            for record in records:
                fh.write(encode(record))
        part.replace(path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
