"""JSON Lines, read and written in one place: every line of a run directory's files (cells, request shards, results,
scores) goes through here, streamed a line at a time, encoded the same stable way. Files are read and written with
the `jsonlines` package, orjson its codec."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import jsonlines
import orjson

from nspec.errors import UserError, writing


def within_64_bits(number: int) -> bool:
    """Whether a whole number reads back as itself: orjson (and llama.cpp's reader) take integers of at most 64 bits,
    signed or unsigned; a larger one comes back as an inexact float."""
    return -(1 << 63) <= number < 1 << 64


def dumps(record: Any) -> bytes:
    """One line's JSON, byte-for-byte stable: compact, UTF-8 as is (no newline: `jsonlines.Writer` adds it)."""
    return _encoded(record, 0)


def encode(record: Any) -> bytes:
    """One line, newline-terminated, as `dumps` makes it: for a writer that must know a line's bytes before it writes
    them (a request shard's size limit and hash, an append that must land whole)."""
    return _encoded(record, orjson.OPT_APPEND_NEWLINE)


def _encoded(record: Any, option: int) -> bytes:
    """orjson encodes a request line of a 128K-token context several times faster than the standard library
    (encoding is most of what compiling costs); what it does not take (an integer past 64 bits, a key that is not a
    string) goes to the standard encoder, which writes it the same way."""
    try:
        return orjson.dumps(record, option=option)
    except TypeError:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return line + b"\n" if option & orjson.OPT_APPEND_NEWLINE else line


def writer(fh: Any) -> jsonlines.Writer:
    """A JSON Lines writer on a binary file ``fh``, lines encoded by `dumps`. It does not flush after each line:
    the caller flushes or closes ``fh`` (closing the writer leaves ``fh`` open)."""
    return jsonlines.Writer(fh, dumps=dumps)


def read(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a JSONL file, one at a time (blank lines skipped); nothing when the file does not exist. A
    last line without its newline is one being appended (by another process, or cut off by a crash) and is left
    out; a damaged line elsewhere is an error naming it."""
    if not path.is_file():
        return
    with open(path, "rb") as fh:
        lines = _Lines(fh)
        records = jsonlines.Reader(lines, loads=orjson.loads).iter(skip_empty=True, allow_none=True)
        try:
            yield from cast(Iterator[dict[str, Any]], records)
        except jsonlines.InvalidLineError as exc:  # not JSON, or not UTF-8
            if not lines.last.endswith(b"\n"):
                return
            raise UserError(f"{path}:{exc.lineno}: not a JSON line; the file is damaged") from None


class _Lines:
    """A binary file's lines as `jsonlines.Reader` reads them, the last one kept (its error gives the line without
    its newline, which says whether it was whole)."""

    def __init__(self, fh: Any) -> None:
        self.fh, self.last = fh, b""

    def __iter__(self) -> Iterator[bytes]:
        for line in self.fh:
            self.last = line
            yield line


def read_raw(path: Path) -> Iterator[tuple[int, dict[str, Any], bytes]]:
    """Each record with its line's byte offset and exact bytes (request shards are re-sent byte for byte:
    `jsonlines.Reader` gives the records only, so the lines are split here and decoded by the same codec). A line
    that is not JSON, a last one cut off too, is an error naming it: these files are written whole."""
    offset = 0
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, 1):
            if line.strip():
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError:
                    raise UserError(f"{path}:{number}: not a JSON line; the file is damaged") from None
                yield offset, record, line
            offset += len(line)


def write(path: Path, records: Iterable[Any]) -> None:
    """Write a JSONL file whole: into a temporary file beside it, then renamed, so it is never seen half-written."""
    part = path.with_name(path.name + ".part")
    try:
        with writing(path), open(part, "wb") as fh, writer(fh) as out:
            out.write_all(records)
        part.replace(path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
