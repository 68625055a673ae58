"""Fitting the cells of one slot (a model, prompt variant, length and trial) in the provider's own token counts,
from counts asked of its count-tokens endpoint (`compiler.counts_file`), with few of them.

The cells of a slot share their haystack span, fitted once per kind of cell (most cells cut the haystack's end;
one with a needle after the last sentence moves its start instead) by probing the count of the slot's *skeleton*
— the request with the haystack span and the templates, without needles and with an empty question — a few times,
each probe's miss turned into the next step with the measured ratio of the provider's tokens to o200k's. A cell's
count is then composed:

    count(cell) = count(skeleton) + count(mini with the cell's needles and question) - count(mini without them)

where a *mini* is the same request around the first few sentences of the span, each needle in the same kind of
place as in the cell (the span's start, its end, or between two sentences). This is exact when inserting a
sentence between two sentences, and filling in the question, add the same tokens whatever the surrounding text —
true of tokenizers that cut text into words before merging, as the ones these models are known to use do — and
`nspec calibrate` checks it against whole-cell counts; a model where it fails is counted cell by cell instead.
So a grid needs about a skeleton probe or three per slot plus one mini per distinct needle-and-question (one in
all when the needle and question are fixed), not one count per cell.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .context import (
    BuiltContext,
    FitError,
    Insert,
    PromptParts,
    _insert_text,
    assemble_at,
    build_context,
    build_on_span,
    fixed_tokens,
    place,
)
from .counts_file import Counter
from .haystack import TokenizedText
from .tokenizers import Tokenizer

MAX_STEPS = 12  # skeleton probes per kind of cell: each lands within the measured ratio's error of the last
TOLERANCE = 16  # tokens a span may fall short of its goal without another probe (a cut point or two)


@dataclass(frozen=True)
class CellPlan:
    """One cell to fit: its prompt (question filled in) and what goes into its haystack."""

    parts: PromptParts
    inserts: list[Insert]


class CountedSlot:
    """The cells of one slot, fitted and counted with ``counter``; `build` returns None when a count it needs is
    not known (a compile whose counts file lacks it: those cells are then estimated)."""

    def __init__(
        self,
        tt: TokenizedText,
        tokenizer: Tokenizer,
        start: int,
        base: PromptParts,
        target: int,
        separator: str | None,
        counter: Counter,
        aim: tuple[float, int] | None = None,
    ) -> None:
        self.tt, self.tokenizer, self.start, self.base = tt, tokenizer, start, base
        self.target, self.separator, self.counter = target, separator, counter
        self.goal = target - base.reserve
        self.templates = tokenizer.own_count(base.prefix + base.suffix) + fixed_tokens(tokenizer, base)
        # The provider's tokens per own token, as last measured (another slot's, to start with), and what the cells'
        # needles and question added to the skeleton: the first probe then lands just inside the goal.
        self.ratio: float | None = aim[0] if aim is not None else None
        self.extra = aim[1] if aim is not None else 0

    @property
    def aim(self) -> tuple[float, int] | None:
        """What the next slot of the model may aim its first probe with: (ratio, extra)."""
        return None if self.ratio is None else (self.ratio, self.extra)

    def build(self, plans: list[CellPlan]) -> list[BuiltContext] | None:
        groups: dict[tuple[str, bool], list[int]] = {}
        for i, plan in enumerate(plans):
            groups.setdefault(self._kind(plan), []).append(i)
        out: list[BuiltContext | None] = [None] * len(plans)
        for members in groups.values():
            fitted = self._fit([plans[i] for i in members])
            if fitted is None:
                return None
            for i, built in zip(members, fitted, strict=True):
                out[i] = built
        return [b for b in out if b is not None]

    def _kind(self, plan: CellPlan) -> tuple[str, bool]:
        """How a cell's span is cut (as `build_context` cuts it): at clean points or sentence boundaries, and
        whether its start moves (a needle after the last sentence, none before the first)."""
        at_end = any(i.depth >= 100 for i in plan.inserts)
        at_start = any(i.depth <= 0 for i in plan.inserts)
        mode = "boundary" if self.separator is not None or at_end else "clean"
        return mode, at_end and self.separator is None and not at_start

    def _fit(self, plans: list[CellPlan]) -> list[BuiltContext] | None:
        """The longest span whose every cell fits the goal, probing from where the proxy's fit of the first ends."""
        tt, mode = self.tt, self._kind(plans[0])[0]
        first = plans[0]
        b, e = build_context(
            tt, self.tokenizer, self.start, first.parts, first.inserts, self.target, self.separator
        ).span
        moving_start = b != self.start
        if self.ratio is not None:  # aim the first probe with the ratio measured before
            own = max(1, math.floor((self.goal - self.extra - TOLERANCE // 2) / self.ratio) - self.templates)
            if moving_start:
                b = tt.next("clean", max(self.start, e - own), e)
            else:
                e = tt.last(mode, min(tt.n_tokens, b + own), b)
        best: tuple[int, int, list[int]] | None = None
        for _ in range(MAX_STEPS):
            counted = self._totals(plans, b, e)
            if counted is None:
                return None
            skeleton, totals = counted
            high = max(totals)
            ratio = self.ratio = max(skeleton, 1) / max(1, (e - b) + self.templates)
            self.extra = high - skeleton
            if high <= self.goal:
                best = (b, e, totals)
                if self.goal - high <= TOLERANCE:
                    break
                room = math.floor((self.goal - high) / ratio) - 1
                if moving_start:
                    nb = tt.next("clean", max(self.start, b - room), b)
                    grown = (nb, e)
                else:
                    grown = (b, tt.last(mode, min(tt.n_tokens, e + room), e))
                if grown == (b, e):
                    break
                b, e = grown
            elif best is not None:
                break  # growing went one cut too far: the last span that fitted is the longest
            else:
                excess = math.ceil((high - self.goal) / ratio) + 1
                if moving_start:
                    b = tt.next("clean", min(e, b + excess), e)
                else:
                    e = tt.last(mode, max(b, e - excess), b)
                if e <= b:
                    break
        if best is None:
            raise FitError(f"cannot fit the request into {self.target} tokens (as the provider counts them)")
        b, e, totals = best
        return [self._context(plan, b, e, total) for plan, total in zip(plans, totals, strict=True)]

    def _totals(self, plans: list[CellPlan], b: int, e: int) -> tuple[int, list[int]] | None:
        """The skeleton's count on the span [b, e), and each cell's."""
        base = self.base
        skeleton = self.counter.prompt(base.prompt(base.prefix + self.tt.text(b, e) + base.suffix))
        if skeleton is None:
            return None
        totals = []
        for plan in plans:
            delta = self._delta(plan, b, e)
            if delta is None:
                return None
            totals.append(skeleton + delta)
        return skeleton, totals

    def _delta(self, plan: CellPlan, b: int, e: int) -> int | None:
        """What the cell's needles and question add to the skeleton's count, measured on a mini: the first sentences
        of the span, with a needle at its start, its end, or between sentences wherever the cell has one there."""
        tt, separator = self.tt, self.separator
        texts = [_insert_text(i, separator) for i in plan.inserts]
        sizes = [self.tokenizer.own_count(t) for t in texts]
        positions = place(tt, b, e, plan.inserts, sizes, separator is None)
        middles = sorted({p for p in positions if b < p < e})
        # The mini starts where the span does only when a needle goes there (its join then depends on the text at
        # the start); otherwise at the slot's start, so that minis are shared by every span of the slot's cells.
        x = b if b in positions else self.start
        cuts = [x]
        for _ in range(len(middles) + 1):
            nxt = tt.next("boundary", cuts[-1] + 1, tt.n_tokens)
            cuts.append(nxt)
        mini_end = cuts[-1]
        where = {p: cuts[1 + i] for i, p in enumerate(middles)}
        mini_positions = [x if p == b else mini_end if p == e else where[p] for p in positions]
        pieces, _ = assemble_at(tt, x, mini_end, mini_positions, plan.inserts, texts, sizes, separator)
        parts, base = plan.parts, self.base
        user = parts.prefix + "".join(p if isinstance(p, str) else tt.text(*p) for p in pieces) + parts.suffix
        with_cell = self.counter.prompt(parts.prompt(user))
        without = self.counter.prompt(base.prompt(base.prefix + tt.text(x, mini_end) + base.suffix))
        if with_cell is None or without is None:
            return None
        return with_cell - without

    def _context(self, plan: CellPlan, b: int, e: int, total: int) -> BuiltContext:
        """The cell's context on the fitted span, its count the composed one."""
        built, _ = build_on_span(self.tt, self.tokenizer, plan.parts, plan.inserts, (b, e), self.target, self.separator)
        return dataclasses.replace(built, tokens=total)
