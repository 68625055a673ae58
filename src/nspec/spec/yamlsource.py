"""Reading one YAML file into plain values plus a map of where each value and key stands.

The file is only *composed* (parsed into nodes), never constructed by ruamel: values are built here from the node
tree, so a tag such as ``!!python/object/apply`` is refused before anything could run, duplicate keys are reported
with both lines, and scalars YAML would silently turn into dates keep their source text for the error message.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, cast

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import CollectionEndEvent, CollectionStartEvent
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from nspec.errors import Location, SpecError, SpecIssue
from nspec.inputs import InputRefused, read_input

# Specs are small; refusing big files up front keeps a mistaken `nspec validate big.jsonl` instant.
MAX_SPEC_BYTES = 1 << 20
# Aliases can expand exponentially ("billion laughs"); no real spec comes near this many values.
MAX_VALUES = 200_000
# No spec nests deeper than a dozen levels; the limit keeps every recursive step (composing, validating) bounded.
MAX_DEPTH = 64

Path = tuple[str | int, ...]

# The most digits of a number a spec may write: more than any setting takes (Python refuses to read 4,300).
MAX_DIGITS = 40
# Half of a UTF-16 pair, which a double-quoted YAML string may write (\ud800) but is no character: nothing holding one
# alone can be written as UTF-8 or sent.
_SURROGATE = re.compile("[\ud800-\udfff]")
_TAG = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{_TAG}{t}" for t in ("str", "int", "float", "bool", "null", "timestamp")}


@dataclass(frozen=True)
class YamlDate:
    """A plain scalar that YAML reads as a date or time. Kept as its text, and no schema type accepts it."""

    text: str

    def __repr__(self) -> str:
        return self.text


@dataclass
class SourceMap:
    """Where each value (and each mapping key) of a document stands, by key path."""

    values: dict[Path, Location] = field(default_factory=dict)
    keys: dict[Path, Location] = field(default_factory=dict)
    # The source text of scalars that YAML did not read as strings, to quote in type errors.
    raw: dict[Path, str] = field(default_factory=dict)

    def value(self, path: Path) -> Location:
        """The location of the value at ``path``, or of its nearest located parent."""
        while path not in self.values and path:
            path = path[:-1]
        return self.values.get(path, Location("?", 1, 1))

    def key(self, path: Path) -> Location:
        """The location of the key that names ``path`` (falls back to its value)."""
        return self.keys.get(path) or self.value(path)

    def update(self, other: SourceMap) -> None:
        self.values.update(other.values)
        self.keys.update(other.keys)
        self.raw.update(other.raw)


def format_path(path: Path) -> str:
    """``("models", 0, "id")`` → ``models[0].id``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass
class Document:
    """A YAML file read into plain values, with its source map."""

    file: str
    data: Any
    source: SourceMap


def read_document(path: str, display: str | None = None) -> Document:
    """Read and parse the YAML file at ``path``; ``display`` is how messages name it (default: ``path``)."""
    name = display or path
    start = Location(name.replace("\0", "\\0"), 1, 1)
    if "\0" not in path and not os.path.lexists(path):
        raise SpecError([SpecIssue(start, "", "no such file")])
    if "\0" not in path and os.path.isdir(path):
        raise SpecError([SpecIssue(start, "", "is a directory, not a spec file")])
    try:
        raw = read_input(path, MAX_SPEC_BYTES)
    except InputRefused as exc:
        raise SpecError([SpecIssue(start, "", exc.reason)]) from None
    return parse_document(raw, name)


def parse_document(raw: bytes, name: str) -> Document:
    """Parse YAML bytes into a Document; every problem becomes a located SpecIssue."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        msg = f"not UTF-8: byte 0x{raw[exc.start]:02x} cannot start or continue a character; save the file as UTF-8"
        raise SpecError([SpecIssue(Location(name, line, column), "", msg)]) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        _check_depth(text, name)
        root = YAML(typ="safe", pure=True).compose(io.StringIO(text))
    except MarkedYAMLError as exc:
        raise SpecError([_syntax_issue(exc, name, text)]) from None
    except YAMLError as exc:
        raise SpecError([SpecIssue(Location(name, 1, 1), "", f"YAML error: {exc}")]) from None
    if root is None:
        raise SpecError([SpecIssue(Location(name, 1, 1), "", "the file is empty; a spec starts with `nspec: 1`")])
    builder = _Builder(name)
    blown = _expansion_limit(root)
    if blown is not None:
        node, path = blown
        builder.issue(node, path, f"the document expands to more than {MAX_VALUES:,} values (aliases?)")
        raise SpecError(builder.issues)
    data = builder.build(root, ())
    if builder.issues:
        raise SpecError(builder.issues)
    return Document(name, data, builder.source)


def _check_depth(text: str, name: str) -> None:
    """Refuse nesting deeper than `MAX_DEPTH` before composing: the parser's events come one at a time, whereas
    composing (and every later walk) recurses once per level. ruamel's scanner looks ahead over a run of flow
    brackets at a cost quadratic in its length, so a text whose brackets (outside quotes and comments) go too deep is
    first checked only up to where they do: the parser refuses it there, in a few dozen events."""
    cut = _bracket_overflow(text)
    if cut is not None:
        # A YAML error here means the cut fell inside something the bracket count misread (a block scalar, say).
        with contextlib.suppress(YAMLError):
            _check_event_depth(text[:cut], name)
    _check_event_depth(text, name)


def _check_event_depth(text: str, name: str) -> None:
    depth = 0
    for event in YAML(typ="safe", pure=True).parse(io.StringIO(text)):
        if isinstance(event, CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                where = Location(name, mark.line + 1, mark.column + 1)
                raise SpecError([SpecIssue(where, "", f"nested more than {MAX_DEPTH} levels deep; no spec needs that")])
        elif isinstance(event, CollectionEndEvent):
            depth -= 1


_FLOW_SKIP = re.compile(r"""'(?:[^']|'')*'?|"(?:[^"\\]|\\.)*"?|(?:^|(?<=\s))#[^\n]*""", re.MULTILINE)
_FLOW_BRACKET = re.compile(r"[\[\]{}]")


def _bracket_overflow(text: str) -> int | None:
    """Where flow brackets, counted outside quotes and comments, first nest deeper than `MAX_DEPTH` (the index
    just past that bracket), or None. A quick estimate: the parser has the last word."""
    depth = 0
    pos = 0
    for skip in itertools.chain(_FLOW_SKIP.finditer(text), [None]):
        end = len(text) if skip is None else skip.start()
        for bracket in _FLOW_BRACKET.finditer(text, pos, end):
            depth += 1 if bracket.group() in "[{" else -1
            if depth > MAX_DEPTH:
                return bracket.end()
            depth = max(depth, 0)
        if skip is not None:
            pos = skip.end()
    return None


def _children(node: Node) -> list[tuple[str | int, Node]]:
    if isinstance(node, MappingNode):
        return [(str(k.value), v) for k, v in node.value]
    if isinstance(node, SequenceNode):
        return list(enumerate(node.value))
    return []


def _expansion_limit(root: Node) -> tuple[Node, Path] | None:
    """Where building the document would pass `MAX_VALUES` values, or None. Aliases make the node graph a DAG that
    expands exponentially ("billion laughs"): counting each shared node once keeps this linear in the file, where
    building value by value would take seconds to reach the limit. A loop counts as one value (the builder refuses
    it)."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()

    def size(node: Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        if id(node) in visiting:
            return 1
        visiting.add(id(node))
        total = 1
        for _, child in _children(node):
            total += size(child)
            if total > MAX_VALUES:
                break
        visiting.discard(id(node))
        sizes[id(node)] = total
        return total

    if size(root) <= MAX_VALUES:
        return None
    # Walk down to where the builder, counting in order, would pass the limit.
    node, path, seen = root, cast(Path, ()), 0
    while True:
        seen += 1
        if seen > MAX_VALUES:
            return node, path
        for key, child in _children(node):
            if seen + sizes.get(id(child), 1) > MAX_VALUES:
                node, path = child, (*path, key)
                break
            seen += sizes.get(id(child), 1)
        else:
            return node, path


def _syntax_issue(exc: MarkedYAMLError, name: str, text: str) -> SpecIssue:
    mark = exc.problem_mark or exc.context_mark
    problem = (exc.problem or "syntax error").strip()
    # At the end of the stream, the problem's mark is useless: point at where the construct began instead.
    at_end = mark is not None and mark.index >= len(text.rstrip())
    if at_end and exc.context_mark is not None:
        mark = exc.context_mark
    context = (exc.context or "").strip()
    if "quoted scalar" in context and "end of stream" in problem:
        problem, context = "unclosed quote: the quoted text that starts here never ends", ""
    elif "another document" in problem:
        problem, context = "a spec is one YAML document; remove the `---` that starts a second one", ""
    message = f"YAML syntax: {problem}"
    if context:
        message += f" ({context}"
        if exc.context_mark is not None and mark is not exc.context_mark:
            message += f" that began at line {exc.context_mark.line + 1}"
        message += ")"
    if "'\\t'" in problem:
        message += "; indent with spaces, not tabs"
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    return SpecIssue(Location(name, line, column), "", message)


class _Builder:
    """Turns a composed node tree into plain values, recording locations and collecting issues."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = SourceMap()
        self.issues: list[SpecIssue] = []
        self.count = 0
        self.active: set[int] = set()

    def loc(self, node: Node) -> Location:
        return Location(self.name, node.start_mark.line + 1, node.start_mark.column + 1)

    def issue(self, node: Node, path: Path, message: str) -> None:
        self.issues.append(SpecIssue(self.loc(node), format_path(path), message))

    def build(self, node: Node, path: Path) -> Any:
        self.count += 1
        if self.count > MAX_VALUES:
            if self.count == MAX_VALUES + 1:
                self.issue(node, path, f"the document expands to more than {MAX_VALUES:,} values (aliases?)")
            return None
        self.source.values[path] = self.loc(node)
        if id(node) in self.active:
            self.issue(node, path, "an alias refers to a node that contains it (a loop)")
            return None
        self.active.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self.mapping(node, path)
            if isinstance(node, SequenceNode):
                if node.tag != f"{_TAG}seq":
                    self.issue(node, path, f"tag {_short_tag(node.tag)} is not allowed; specs use plain YAML only")
                    return None
                return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
            assert isinstance(node, ScalarNode)
            return self.scalar(node, path)
        finally:
            self.active.discard(id(node))

    def mapping(self, node: MappingNode, path: Path) -> dict[str, Any] | None:
        if node.tag != f"{_TAG}map":
            self.issue(node, path, f"tag {_short_tag(node.tag)} is not allowed; specs use plain YAML only")
            return None
        out: dict[str, Any] = {}
        seen: dict[str, Location] = {}
        for key_node, value_node in node.value:
            if key_node.tag == f"{_TAG}merge":
                self.issue(key_node, path, "merge keys (<<) are not supported; use `include:` or `defaults:`")
                continue
            if not isinstance(key_node, ScalarNode) or key_node.tag not in (f"{_TAG}str", f"{_TAG}int"):
                self.issue(key_node, path, "a key must be a plain name")
                continue
            key = _paired(str(key_node.value))
            if key is None:
                self.issue(key_node, path, LONE_SURROGATE)
                continue
            if key in seen:
                first = seen[key]
                self.issue(key_node, (*path, key), f"duplicate key {key!r}; it is already set at line {first.line}")
                continue
            seen[key] = self.loc(key_node)
            self.source.keys[(*path, key)] = seen[key]
            out[key] = self.build(value_node, (*path, key))
        return out

    def scalar(self, node: ScalarNode, path: Path) -> Any:
        tag, text = node.tag, node.value
        if tag not in _SCALAR_TAGS:
            self.issue(
                node,
                path,
                f"tag {_short_tag(tag)} is not allowed; specs use plain YAML only, nothing is executed",
            )
            return None
        if tag == f"{_TAG}str":
            paired = _paired(text)
            if paired is None:
                self.issue(node, path, LONE_SURROGATE)
            return paired
        self.source.raw[path] = text
        if tag == f"{_TAG}null":
            return None
        if tag == f"{_TAG}bool":
            return text.lower() == "true"
        if tag == f"{_TAG}int":
            digits = sum(c.isalnum() for c in text)
            if digits > MAX_DIGITS:
                self.issue(node, path, f"a number of {digits:,} digits: specs take numbers of up to {MAX_DIGITS}")
                return None
            return _yaml_int(text)
        if tag == f"{_TAG}float":
            value = _yaml_float(text)
            if not math.isfinite(value):
                # Every comparison with NaN is false, so a schema's bounds would let it through.
                self.issue(node, path, f"YAML reads {text} as a number that is not finite; specs take finite numbers")
                return None
            return value
        return YamlDate(text)


LONE_SURROGATE = (
    "holds a lone surrogate (half of a UTF-16 pair, such as \\ud800): no character, which no text sent may hold; "
    "write the character itself (or \\U0001F600 for one beyond \\uFFFF)"
)


def _paired(text: str) -> str | None:
    """``text`` with each pair of surrogates YAML's ``\\u`` escapes wrote (``\\ud83d\\ude00``, as JSON writes
    one character beyond U+FFFF) made the character it encodes; None where a surrogate is left alone."""
    if not _SURROGATE.search(text):
        return text
    try:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:
        return None


def _short_tag(tag: str | None) -> str:
    tag = tag or "?"
    return "!!" + tag[len(_TAG) :] if tag.startswith(_TAG) else tag


def _yaml_int(text: str) -> int:
    t = text.replace("_", "")
    sign = -1 if t.startswith("-") else 1
    t = t.lstrip("+-")
    if t.startswith(("0x", "0X")):
        return sign * int(t[2:], 16)
    if t.startswith(("0o", "0O")):
        return sign * int(t[2:], 8)
    return sign * int(t, 10)


def _yaml_float(text: str) -> float:
    t = text.replace("_", "").lower()
    if t.endswith(".nan"):
        return float("nan")
    if t.endswith(".inf"):
        return float("-inf") if t.startswith("-") else float("inf")
    return float(t)


def explain_scalar(value: Any, raw: str | None, for_text: bool = True) -> str | None:
    """Why an unquoted scalar may not be what the user meant, or None when its type is unsurprising."""
    if isinstance(value, YamlDate):
        return (
            f'YAML reads {value.text} as a date; quote it ("{value.text}") if you meant text'
            if for_text
            else f"YAML reads {value.text} as a date"
        )
    if raw is None or isinstance(value, str) or not for_text:
        return None
    kind = "a boolean" if isinstance(value, bool) else "nothing (null)" if value is None else "a number"
    shown = "" if value is None or str(value) == raw else f" ({value})"
    return f'YAML reads {raw} as {kind}{shown}; quote it ("{raw}") if you meant text'
