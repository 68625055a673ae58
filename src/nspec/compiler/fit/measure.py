"""The token measures every kind of cell shares: what a fitted draft is (`Fitted`), how its count is recorded, and
the reference count in o200k_base that lets lengths compare across tokenizers."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nspec.prompt import Prompt

from ..models import Model
from ..stats import CompileStats
from ..tokenizers import chat_framing, encoding

_CLEAN_LINE_START = re.compile(r"(?<=\n)(?=[A-Za-z0-9])")  # a clean cut point (`compiler.haystack`)


@dataclass
class Fitted:
    """A draft fitted to its slot: what its cell's record and request line are made of."""

    prompt: Prompt  # as its model is sent it
    tokens: int  # the prompt's, in the model's count
    exact: bool
    reserve: int  # the answer budget, within the length
    counted: dict[str, Any]  # how it was counted: `counted_by`, and `margin`, `fitted_to` for an estimate
    haystack_tokens: int  # the context's tokens without the templates
    reference_tokens: int  # the prompt in o200k_base with OpenAI's chat framing
    question: str
    expected: list[str]
    data: dict[str, Any]
    needles: list[dict[str, Any]] = field(default_factory=list)  # the placed inserts, with their actual depths
    haystack_uses: int = 0  # the most times one haystack source appears in it
    extra: dict[str, Any] = field(default_factory=dict)  # fields of its kind: question_index, cache, size
    request: dict[str, Any] | None = None  # its request line, where fitting built it already
    composed: int | None = None  # the count composed from the provider's counts (calibrate checks it)
    opens_group: tuple[int, int] | None = None  # first of a cache group: the group's forecast requests and bytes


def estimated(model: Model, length: int, reserve: int, stats: CompileStats) -> dict[str, Any]:
    """How a cell counted by the model's tokenizer says so: the tokenizer, its margin where it is a proxy, and the
    length it was fitted to where that margin kept it inside max_context (counted in ``stats``)."""
    counted: dict[str, Any] = {"counted_by": model.tokenizer.name}
    if model.tokenizer.margin:
        counted["margin"] = model.tokenizer.margin
    target = model.fit_target(length, reserve)
    if target < length:
        counted["fitted_to"] = target
        stats.capped[model.label] += 1
    return counted


def reference_tokens(texts: Sequence[str]) -> int:
    """The request's texts in o200k_base tokens with OpenAI's chat framing: one reference for every model, so
    lengths compare across tokenizers."""
    o200k = encoding("o200k_base")
    return chat_framing(len(texts)) + sum(o200k.count(t) for t in texts)


class PieceCounts:
    """o200k_base counts of texts that share most of their pieces (the cells of one model and trial cut the same
    haystack at other places): each text counted a piece at a time between line starts that are clean cut points (a
    letter or digit after a newline), each piece's count kept until `clear`."""

    def __init__(self) -> None:
        self._kept: dict[str, int] = {}

    def reference_tokens(self, texts: Sequence[str]) -> int:
        """`reference_tokens` of ``texts``, from the pieces kept."""
        o200k, kept = encoding("o200k_base"), self._kept
        total = chat_framing(len(texts))
        for text in texts:
            for piece in _CLEAN_LINE_START.split(text):
                count = kept.get(piece)
                if count is None:
                    count = kept[piece] = o200k.count(piece)
                total += count
        return total

    def clear(self) -> None:
        self._kept.clear()
