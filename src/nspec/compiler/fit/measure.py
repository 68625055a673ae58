"""The token measures every kind of cell shares: what a fitted draft is (`Fitted`), how its count is recorded, and
the reference count in o200k_base that lets lengths compare across tokenizers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nspec.prompt import Prompt

from ..context import BuiltContext, count_pieces
from ..haystack import TokenizedText
from ..models import Model
from ..stats import CompileStats
from ..tokenizers import chat_framing, encoding


@dataclass
class Fitted:
    """A draft fitted to its slot: what its cell's record and request line are made of."""

    prompt: Prompt  # as its model is sent it
    tokens: int  # the prompt's, in the model's count
    exact: bool
    reserve: int  # the answer budget, within the length
    counted: dict[str, Any]  # how it was counted: `counted_by`, and `margin`, `fitted_to` for an estimate
    haystack_tokens: int  # the context's tokens without the templates
    reference_tokens: int | None  # the prompt in o200k_base with OpenAI's chat framing (None: not counted, no record)
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


class ReferenceCounts:
    """`reference_tokens` of contexts cut from a haystack tokenised in another encoding, without tokenising them
    again: the haystack's text tokenised in o200k_base once (for the last haystack seen: the models and trials of a
    compile share it), and each context counted from the pieces it was built of (`context.count_pieces`), its
    haystack ranges by o200k_base's tokens between their clean points — where every encoding cuts alike."""

    def __init__(self) -> None:
        self._haystack: TokenizedText | None = None
        self._o200k: TokenizedText | None = None  # the same text in o200k_base tokens

    def reference_tokens(self, tt: TokenizedText, built: BuiltContext, others: Sequence[str]) -> int:
        """`reference_tokens` of the request whose user message is ``built`` (cut from ``tt``) and whose other
        texts are ``others``."""
        o200k = encoding("o200k_base")
        if self._haystack is not tt:
            self._haystack, self._o200k = tt, TokenizedText(tt.data.decode("utf-8"), o200k)
        reference, starts = self._o200k, tt.starts
        assert reference is not None

        def between(first: int, last: int) -> int:
            return reference.token_at_byte(starts[last]) - reference.token_at_byte(starts[first])

        user = count_pieces(tt, o200k, built.pieces, between)
        return chat_framing(1 + len(others)) + user + sum(o200k.count(t) for t in others)
