"""A request's texts, as every provider takes them: a system prompt, a conversation, and a prefill.

A conversation is one user turn (a needle's question about its haystack) or several, from a user turn to a user
turn: user and assistant alternating (MRCR's earlier exchanges), or user turns in a row (needlehaystack's context,
then its question). A prefill is the start of the answer for the
model to continue; a model that cannot continue one gets it at the end of the last user turn instead (`folded`), as
RULER sends its answer prefix to a chat API. Which models continue one is their provider's to say
(`Provider.takes_prefill`); `nspec.compiler.providers.contract.as_sent` applies it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Literal

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class Turn:
    role: Role
    text: str


@dataclass(frozen=True)
class Prompt:
    system: str | None
    turns: tuple[Turn, ...]
    prefill: str | None = None

    def __post_init__(self) -> None:
        if not self.turns or self.turns[-1].role != "user":
            raise ValueError("a conversation ends with a user turn")
        if self.turns[0].role != "user":
            raise ValueError("a conversation starts with a user turn")
        # User turns may follow each other (needlehaystack sends its context and its question apart); an answer
        # always answers a user turn.
        for before, turn in zip(self.turns, self.turns[1:], strict=False):
            if before.role == turn.role == "assistant":
                raise ValueError("an assistant turn follows a user turn")

    @classmethod
    def ask(cls, system: str | None, user: str, prefill: str | None = None) -> Prompt:
        """A single-turn prompt: one user message."""
        return cls(system, (Turn("user", user),), prefill)

    @property
    def user(self) -> str:
        """The last user turn's text (where a question goes)."""
        return self.turns[-1].text

    def folded(self) -> Prompt:
        """The prompt with its prefill appended to the last user turn, as written (a prefix that wants a space or a
        line before it starts with one, as RULER's do)."""
        if self.prefill is None:
            return self
        last = Turn("user", self.turns[-1].text + self.prefill)
        return replace(self, turns=(*self.turns[:-1], last), prefill=None)

    def messages(self) -> Iterator[tuple[str, str]]:
        """(role, text) of each message in the order the model reads them: system, turns, then the prefill as an
        assistant message."""
        if self.system is not None:
            yield "system", self.system
        for turn in self.turns:
            yield turn.role, turn.text
        if self.prefill is not None:
            yield "assistant", self.prefill

    def texts(self) -> list[str]:
        return [text for _, text in self.messages()]
