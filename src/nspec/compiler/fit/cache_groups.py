"""The cache groups of a compile's Fill cells (`compiler.caching` says what a group is and how its cells are cut):
each group's head, ladder and forecast, opened at its first cell, and each cell's cut."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ..caching import CachePlanner, CachePolicy, CellPrefix, build_ladder
from ..context import BuiltContext, PromptParts, fixed_tokens
from ..models import ModelSlot
from ..providers.contract import CacheCut
from ..tasks import Draft


class CacheGroups:
    """The cache groups of a compile's Fill cells: each group's head (the prompt before its haystack), ladder and
    forecast, opened at its first cell, and each cell's cut (`CachePlanner`). ``plan`` is where each slot's cells put
    their first inserts (every task's `depth_plan`: the tasks of `grid.params` points share a group)."""

    def __init__(self, seed: int, lengths: Sequence[int], plan: list[tuple[float | None, int]], is_stack: bool) -> None:
        self.planner = CachePlanner(seed)
        self.lengths, self.plan, self.is_stack = list(lengths), plan, is_stack
        self._heads: dict[str, int] = {}  # per group: tokens before the haystack (own units)

    def is_control(self, policy: CachePolicy, cell_id: str) -> bool:
        return self.planner.is_control(policy, cell_id)

    def cut(
        self, slot: ModelSlot, base: PromptParts, draft: Draft, cell: tuple[str, PromptParts, bool], built: BuiltContext
    ) -> tuple[CacheCut, tuple[int, int] | None]:
        """The cache shape of ``draft``'s cell (``cell``: its id, its prompt around the haystack, whether it is in
        the control arm) built as ``built``; its group is every cell of the model, trial and prompt variant. The
        first cell of a group also gets the group's forecast size (requests, bytes), so the group can be kept in one
        shard. ``base`` is the slot's prompt around its haystack with no question."""
        model = slot.model
        cell_id, parts, control = cell
        assert model.cache is not None
        group = "\0".join([model.label, str(slot.variant), str(slot.trial)])
        opens = None if self.planner.known(group) else self._open(slot, group, base)
        head = self._heads[group]
        scale = model.tokenizer.scale
        begin = built.span[0]
        # A needle at depth 100 moves the haystack's start, a question in the system prompt or before the haystack
        # changes what precedes it: such a cell shares only its context with its siblings.
        shares = begin == slot.start and (parts.system, parts.prefix) == (base.system, base.prefix)
        context_chars = len(built.user) - len(parts.suffix)
        context = cell_id
        if draft.question_index is not None:  # one of several questions asked of one context
            context = hashlib.sha256(f"{parts.system}\0{built.user[:context_chars]}".encode()).hexdigest()
        prefix = CellPrefix(
            needle_tokens=scale(head + built.first_insert - begin),
            context_chars=context_chars,
            context_tokens=scale(head + built.haystack_tokens),
            context=context,
            siblings_ahead=draft.siblings_ahead,
            first_insert=built.first_insert if shares else None,
            forecast=self._forecast(slot, draft.identity.get("depth"), draft.negative, head),
        )
        return self.planner.cut(model.cache, group, control, prefix), opens

    def _open(self, slot: ModelSlot, group: str, base: PromptParts) -> tuple[int, int]:
        """A group's head tokens, its ladder (for providers that mark breakpoints) and the forecast of where its
        cells' first needles go, from the grid; returns the forecast of its requests and their bytes."""
        model = slot.model
        assert model.cache is not None
        head = self._heads[group] = fixed_tokens(model.tokenizer, base) + model.tokenizer.own_count(base.prefix)
        lengths = [n for n in self.lengths if model.max_context is None or n <= model.max_context]
        forecast = [(self._forecast(slot, d, d is None, head, n), cells) for n in lengths for d, cells in self.plan]
        ladder = None
        if model.cache.style.kind == "breakpoints":
            longest = max((self._room(slot, n, head) for n in lengths), default=0)
            ladder = build_ladder(slot.tt, slot.start, longest, len(base.prefix), head, model.tokenizer.scale)
        self.planner.open(group, ladder, forecast)
        # a request is about its haystack's bytes, plus the JSON around it
        per_token = len(slot.tt.data) / max(1, slot.tt.n_tokens)
        cells = sum(k for _, k in self.plan)
        size = sum(cells * (int(self._room(slot, n, head) * per_token * 1.02) + 1024) for n in lengths)
        return cells * len(lengths), size

    def _forecast(
        self, slot: ModelSlot, depth: float | None, negative: bool, head: int, length: int | None = None
    ) -> int:
        """Where a cell's first needle is forecast to go, as a haystack token (-1: a needle at the very end, which
        moves the haystack's start)."""
        room = self._room(slot, slot.length if length is None else length, head)
        if negative or depth is None:
            return slot.start + room
        if depth >= 100 and not self.is_stack:
            return -1
        return slot.start + int(room * depth / 100)

    @staticmethod
    def _room(slot: ModelSlot, length: int, head: int) -> int:
        """About how many haystack tokens (the tokenizer's own) a cell of ``length`` holds."""
        per_token = slot.model.tokenizer.scale(1_000_000) / 1_000_000
        return max(0, int((length - slot.reserve) / per_token) - head)
