"""Every JSON and JSON Lines file a spec names — published rows, QA sets, needle sets, stack items, counts — decoded
one way, as untrusted as a provider's bytes.

- Decoded by orjson, which cannot recurse past its own depth limit, builds no integer of thousands of digits (one
  past 64 bits is read as a float, one past a float's range is refused), and refuses bytes that are not UTF-8 and a
  lone surrogate (``"\\ud800"``), which no text sent to a provider may hold.
- Then no value may nest deeper than `MAX_DEPTH` (nspec's own files nest 8 deep): nothing that walks a value
  recursively later (a schema's check, a message quoting it) can overflow the stack.
- A JSON Lines record is one line, no longer than the reader's cap on a record; the file's size is capped by
  whoever read it (`nspec.inputs.read_input`).
- Every refusal is a `DataError` naming the file, the line and column, and the field where there is one. Where a
  value is, is found only to say so: the file is never walked twice otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from nspec.errors import UserError

MAX_DEPTH = 64  # containers inside containers: a SQuAD file nests 8 deep, a published row 3
TOO_DEEP = f"nested more than {MAX_DEPTH} deep: nspec reads no such data"
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, which some editors write first: read past

JsonPath = tuple[str | int, ...]  # keys and indices from the top of a JSON document


class DataError(UserError):
    """A data file a spec names that nspec cannot use, located: ``name`` (the file as the spec names it), ``line``
    and ``column`` (from 1; None: the record as a whole), ``field`` (the dotted path to the value, "" for the record
    itself) and what is wrong."""

    def __init__(self, name: str, line: int, column: int | None, field: str, reason: str) -> None:
        self.name, self.line, self.column, self.field, self.reason = name, line, column, field, reason
        at = f"{name}:{line}" if column is None else f"{name}:{line}:{column}"
        super().__init__(f"{at}: {field}: {reason}" if field else f"{at}: {reason}")


def dotted(path: JsonPath) -> str:
    """A JSON path as a message names it: ``data[0].paragraphs[3].context``."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


@dataclass(frozen=True)
class Source:
    """A data file's bytes as read, with its name as the spec gives it: what a refusal is located in."""

    name: str
    data: bytes

    def position(self, pos: int) -> tuple[int, int]:
        """The line and column (in characters, from 1) of byte ``pos``."""
        line_start = self.data.rfind(b"\n", 0, pos) + 1
        return self.data.count(b"\n", 0, pos) + 1, len(self.data[line_start:pos].decode("utf-8", "replace")) + 1

    def error(self, start: int, path: JsonPath, reason: str) -> DataError:
        """A refusal of the value at ``path`` in the document that starts at byte ``start``."""
        return DataError(self.name, *self.position(_find(self.data, start, path)), dotted(path), reason)

    def document(self, start: int = 0, end: int | None = None) -> Any:
        """The JSON document in bytes ``start`` to ``end``, decoded and checked."""
        view = memoryview(self.data)[start:end]
        try:
            value = orjson.loads(view)
        except orjson.JSONDecodeError as exc:
            pos, reason = start + exc.pos, _said(exc.msg)
            if "UTF-8" in exc.msg:  # orjson checks the whole input first, and says only that: find the byte
                try:
                    view.tobytes().decode("utf-8")
                except UnicodeDecodeError as bad:
                    pos, reason = start + bad.start, f"not UTF-8 text (byte 0x{bad.object[bad.start]:02x})"
            raise DataError(self.name, *self.position(pos), "", reason) from None
        finally:
            view.release()
        deep = _too_deep(value)
        if deep is not None:  # named by its first steps: the whole path is as long as the nesting
            where = self.position(_find(self.data, start, deep))
            raise DataError(self.name, *where, dotted(deep[:4]) + "...", TOO_DEEP)
        return value


@dataclass(frozen=True)
class Record:
    """One record of a data file: a line of JSON Lines, an element of a JSON list, or a whole document."""

    source: Source
    start: int  # the byte where the document holding it starts
    at: JsonPath  # where it is in that document
    value: Any

    @property
    def line(self) -> int:
        """The line it starts on."""
        return self.source.position(_find(self.source.data, self.start, self.at))[0]

    def refusal(self, reason: str) -> DataError:
        """A refusal of the record as a whole, at the line it starts on (found only now)."""
        return DataError(self.source.name, self.line, None, "", reason)

    def error(self, reason: str, path: JsonPath = ()) -> DataError:
        """A refusal of the record's value at ``path``, at its line and column."""
        return self.source.error(self.start, (*self.at, *path), reason)

    def embedded(self, text: str, path: JsonPath, what: str) -> Any:
        """The JSON document the text ``text`` at ``path`` holds (MRCR's `prompt`), decoded as a file is; ``what``
        it must be, for a refusal."""
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise self.error(f"must be {what}: {_said(exc.msg)}, at byte {exc.pos + 1:,} of the text", path) from None
        if _too_deep(value) is not None:
            raise self.error(f"must be {what}: {TOO_DEEP}", path)
        return value


def decode(source: Source) -> Record:
    """The file as one JSON document."""
    start = _first(source)
    return Record(source, start, (), source.document(start))


def lines(source: Source, record_limit: int) -> Iterator[Record]:
    """The file as JSON Lines: a record per line that is not blank, each no longer than ``record_limit`` bytes."""
    data, start = source.data, _first(source)
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        if end - start > record_limit:
            raise source.error(start, (), f"a line of {end - start:,} bytes: nspec reads records of {record_limit:,}")
        if not _BLANK.fullmatch(data, start, end):
            yield Record(source, start, (), source.document(start, end))
        start = end + 1


def records(source: Source, record_limit: int) -> Iterator[Record]:
    """The file's records: the elements of one JSON list (a file whose first character other than white space is
    ``[``), else its lines (`lines`)."""
    if _LIST.match(source.data, _first(source)) is None:
        yield from lines(source, record_limit)
        return
    whole = decode(source)
    for i, value in enumerate(whole.value):
        yield Record(source, whole.start, (i,), value)


def _first(source: Source) -> int:
    """Where the file's JSON starts: after a byte order mark, if it has one."""
    return len(BOM) if source.data.startswith(BOM) else 0


def _said(message: str) -> str:
    """Why orjson refused a document, in words that say what to change."""
    if "UTF-8" in message:
        return "not UTF-8 text"
    if "surrogate" in message:
        return "a lone surrogate (half of a UTF-16 pair, such as \\ud800): no character, which no text sent may hold"
    if "infinity" in message:
        return "a number too large to read (beyond a 64-bit float)"
    if "depth limit" in message:
        return TOO_DEEP
    return f"not JSON ({message})"


def _too_deep(value: Any) -> JsonPath | None:
    """The path of a container nested deeper than `MAX_DEPTH` in ``value``, if there is one. The containers are
    walked a level at a time, without recursion and without their paths (a QA set holds hundreds of thousands):
    a path is made only for a refusal (`_deep_path`)."""
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(MAX_DEPTH):
        level = [
            child
            for container in level
            for child in (container.values() if isinstance(container, dict) else container)
            if isinstance(child, dict | list)
        ]
        if not level:
            return None
    return _deep_path(value)


def _deep_path(value: Any) -> JsonPath:
    """The path of the first container nested `MAX_DEPTH` deep in ``value`` (one is), depth first."""
    todo: list[tuple[JsonPath, Any]] = [((), value)]
    while True:
        path, container = todo.pop()
        if len(path) >= MAX_DEPTH:
            return path
        children = container.items() if isinstance(container, dict) else enumerate(container)
        todo += [((*path, key), child) for key, child in children if isinstance(child, dict | list)]


# -- where a value is: only to say so --------------------------------------------------------------------------

_BLANK = re.compile(rb"[ \t\r\n]*")
_LIST = re.compile(rb"[ \t\r\n]*\[")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR = re.compile(rb"[^ \t\r\n,:\[\]{}\"]+")


def _skip(data: bytes, pos: int) -> int:
    """``pos`` past white space, commas and colons: between the parts of a document nspec has decoded already."""
    while pos < len(data) and data[pos] in b" \t\r\n,:":
        pos += 1
    return pos


def _end(data: bytes, pos: int) -> int:
    """Where the value starting at ``pos`` ends, found without recursion."""
    depth = 0
    while pos < len(data):
        pos = _skip(data, pos)
        byte = data[pos : pos + 1]
        if byte == b'"':
            match = _STRING.match(data, pos)
            pos = match.end() if match else len(data)
        elif byte in (b"[", b"{"):
            depth, pos = depth + 1, pos + 1
        elif byte in (b"]", b"}"):
            depth, pos = depth - 1, pos + 1
        else:
            match = _SCALAR.match(data, pos)
            pos = match.end() if match else pos + 1
        if depth <= 0:
            return pos
    return pos


def _find(data: bytes, start: int, path: JsonPath) -> int:
    """Where the value at ``path`` starts in the (decoded, so well-formed) document starting at byte ``start``; as
    far as the path can be followed."""
    pos = _skip(data, start)
    for step in path:
        if isinstance(step, str) and data.startswith(b"{", pos):
            pos = _skip(data, pos + 1)
            while data.startswith(b'"', pos):
                key_end = _end(data, pos)
                found = orjson.loads(data[pos:key_end]) == step
                pos = _skip(data, key_end)
                if found:
                    break
                pos = _skip(data, _end(data, pos))
        elif isinstance(step, int) and data.startswith(b"[", pos):
            pos = _skip(data, pos + 1)
            for _ in range(step):
                pos = _skip(data, _end(data, pos))
        else:
            break
    return pos
