"""`Sized` drafts: a context the family builds at a size, at the largest size whose prompt and answer budget fit
the slot's length in the model's tokens (RULER's way)."""

from __future__ import annotations

import json
from collections.abc import Callable

from nspec.compiler.providers.contract import as_sent
from nspec.errors import CellError
from nspec.prompt import Prompt, Turn

from ..models import Model, ModelSlot
from ..record import Records
from ..stats import CompileStats
from ..tasks import Built, Draft, Sized, largest_within
from ..tasks.sizing import NotGrowing
from .generated import fitted_prompt, system
from .measure import Fitted

Build = tuple[Built, Prompt, int, bool]  # a build, its prompt as sent, its tokens and whether they are exact


def sized_prompt(model: Model, system_prompt: str | None, built: Built) -> Prompt:
    """A sized build as its model is sent it: its history, its text as the last user turn, its answer prefix."""
    prompt = Prompt(system_prompt, (*built.history, Turn("user", built.text)), built.answer_prefix or None)
    return as_sent(model.api, model.entry, prompt)


class SizedFitter:
    """Fits the `Sized` drafts of a compile. Sizes found are kept as hints: the next sample at the same length (a
    family's step) or the next model on the same sample (RULER's grid) starts its search there,
    and finds the same size from anywhere, in fewer builds from close by. A size whose prompt holds more characters
    than the length's tokens could (`Model.prompt_tokens`'s floor) does not fit, untokenised: no search holds more
    than about twice the length's text."""

    def __init__(self, records: Records, stats: CompileStats) -> None:
        self.records, self.stats = records, stats
        self._sizes: dict[tuple[str, str, int, str], int] = {}  # a draft's size, per model, length and draft
        self._searched: dict[tuple[str, int, str], int | None] = {}  # the grid index found, per length and draft
        self._stepped: dict[tuple[str, int, str], int] = {}  # the size last found by a step, per length and draft

    def fit(self, slot: ModelSlot, draft: Draft, sized: Sized) -> Fitted:
        """The draft built at the largest size whose prompt and answer budget fit the slot's length; refused where
        no size fits, the size search never ends or the build cannot be scored (`Built.unscorable`)."""
        model = slot.model
        reserve = sized.reserve or slot.reserve
        # The provider's counts are the model's own: no proxy's margin to keep inside max_context.
        target = slot.length if model.counter is not None else model.fit_target(slot.length, reserve)
        at = _builds(slot, draft, sized, target - reserve)
        cell = f"cell {self.records.cell_id(slot, draft)} ({model.label}, length {slot.length})"
        try:
            size = self._size(slot, draft, sized, target - reserve, lambda size: at(size)[2])
        except NotGrowing as exc:
            raise CellError(f"{cell}: the {self.records.family} task's size search never ends: {exc}") from None
        if size == 0:
            smallest = sized.step if sized.search is None else sized.search.first
            raise CellError(
                f"{cell}: the {self.records.family} task at its smallest size ({smallest}) needs more than "
                f"{target - reserve} tokens (the length less reserve_tokens {reserve})"
            )
        built, prompt, tokens, exact = at(size)
        if built.unscorable is not None:
            raise CellError(f"{cell}: no reply could fail or pass it: {built.unscorable}")
        if built.redrawn:
            self.stats.redrawn[model.label] += 1
        if size == sized.limit:
            self.stats.short[model.label] += 1
            self.stats.shortest[model.label] = min(self.stats.shortest.get(model.label, tokens), tokens)
        question = built.question if built.question is not None else draft.question
        expected, data = [*draft.expected, *built.expected], {**draft.data, **built.data}
        return fitted_prompt(
            slot, prompt, (tokens, exact), reserve, self.stats, question, expected, data, {"size": size}
        )

    def _size(self, slot: ModelSlot, draft: Draft, sized: Sized, room: int, count: Callable[[int], int]) -> int:
        """The draft's size at the slot (0: none fits): the largest whose prompt, of ``count(size)`` tokens, is
        within ``room``."""
        model = slot.model
        key = (model.label, str(slot.variant), slot.length, json.dumps([slot.point, draft.identity], sort_keys=True))
        if sized.search is None:
            # In units of the step, the line through the sizes counted so far guesses the next (a graph of a million
            # edges is found in a handful of builds, not forty); the last sample's size at this length, or another
            # model's on this sample, starts it.
            step, near = sized.step, self._sizes.get(key, self._stepped.get(key[1:]))
            last = None if sized.limit is None else sized.limit // step
            units = largest_within(lambda k: count(k * step), room, 1, last, near and near // step) if last != 0 else 0
            size = self._sizes[key] = self._stepped[key[1:]] = units * step
            return size
        size = self._searched_size(key, slot, draft, sized, room)
        while size > 0 and count(size) > room:  # RULER takes a step off while the sample overflows
            size = size - sized.step if size > sized.step else 0
        return size

    def _searched_size(
        self, key: tuple[str, str, int, str], slot: ModelSlot, draft: Draft, sized: Sized, room: int
    ) -> int:
        """The largest size on ``sized.search``'s grid at which its sample fits ``room`` tokens (0 if none does),
        found once per ``key``; the search starts from the size another model found on the same sample."""
        searched = self._sizes.get(key)
        if searched is None:
            search, model, system_prompt = sized.search, slot.model, system(slot, draft)
            assert search is not None

            def size(k: int) -> int:  # the k-th size of the grid, from 1
                return search.first + (k - 1) * search.step

            def count(k: int) -> int:
                return model.prompt_tokens(sized_prompt(model, system_prompt, search.build(size(k))), room)[0]

            last = None if sized.limit is None else (sized.limit - search.first) // search.step + 1
            k = largest_within(count, room, 1, last, self._searched.get(key[1:])) if last is None or last >= 1 else 0
            self._searched[key[1:]] = k or None
            searched = self._sizes[key] = size(k) if k else 0
        return searched


def _builds(slot: ModelSlot, draft: Draft, sized: Sized, room: int) -> Callable[[int], Build]:
    """The draft's build at a size, with its prompt and count (a floor past ``room``). Of the sizes tried, only the
    largest that fits is kept — the one a search ends on — so a search at a length of millions holds one context,
    not each it tried."""
    model, system_prompt = slot.model, system(slot, draft)
    kept: dict[int, Build] = {}

    def at(size: int) -> Build:
        if size in kept:
            return kept[size]
        built = sized.build(size)
        prompt = sized_prompt(model, system_prompt, built)
        tried = (built, prompt, *model.prompt_tokens(prompt, room))
        if tried[2] <= room and all(size > k for k in kept):
            kept.clear()
            kept[size] = tried
        return tried

    return at
