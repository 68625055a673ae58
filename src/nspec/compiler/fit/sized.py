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
from ..tasks import Built, Draft, Sized, largest_fitting, largest_within
from .generated import fitted_prompt, system
from .measure import Fitted

Build = tuple[Built, Prompt, int, bool]  # a build, its prompt as sent, its tokens and whether they are exact


def sized_prompt(model: Model, system_prompt: str | None, built: Built) -> Prompt:
    """A sized build as its model is sent it: its history, its text as the last user turn, its answer prefix."""
    prompt = Prompt(system_prompt, (*built.history, Turn("user", built.text)), built.answer_prefix or None)
    return as_sent(model.api, model.entry, prompt)


class SizedFitter:
    """Fits the `Sized` drafts of a compile. Sizes found are kept as hints: the next sample at the same length
    (`largest_fitting`'s `near`) or the next model on the same sample (`largest_within`'s) starts its search there,
    and finds the same size from anywhere, in fewer builds from close by. ``smallest`` (validate) builds each draft
    at its smallest size only, all a refusal depends on: a size that fits there means some size fits, and generators
    refuse only sizes too small for what they hold."""

    def __init__(self, records: Records, stats: CompileStats, smallest: bool) -> None:
        self.records, self.stats, self.smallest = records, stats, smallest
        self._sizes: dict[tuple[str, str, int, str], int] = {}  # a draft's size, per model, length and draft
        self._searched: dict[tuple[str, int, str], int | None] = {}  # the grid index found, per length and draft

    def fit(self, slot: ModelSlot, draft: Draft, sized: Sized) -> Fitted:
        """The draft built at the largest size whose prompt and answer budget fit the slot's length."""
        model = slot.model
        reserve = sized.reserve or slot.reserve
        # The provider's counts are the model's own: no proxy's margin to keep inside max_context.
        target = slot.length if model.counter is not None else model.fit_target(slot.length, reserve)
        at = _builds(slot, draft, sized)

        def fits(size: int) -> bool:
            return at(size)[2] + reserve <= target

        key = (model.label, str(slot.variant), slot.length, json.dumps([slot.point, draft.identity], sort_keys=True))
        smallest = sized.step if sized.search is None else sized.search.first
        if self.smallest:
            size = smallest if (sized.limit is None or smallest <= sized.limit) and fits(smallest) else 0
        elif sized.search is None:
            # The last sample's size at this length: most samples fit within a step of it, found in two or three
            # builds.
            size = self._sizes[key] = largest_fitting(fits, sized.step, sized.limit, near=self._sizes.get(key))
        else:
            size = self._searched_size(key, slot, draft, sized, target - reserve)
            while size > 0 and not fits(size):  # RULER takes a step off while the sample overflows
                size = size - sized.step if size > sized.step else 0
        if size == 0:
            raise CellError(
                f"cell {self.records.cell_id(slot, draft)} ({model.label}, length {slot.length}): the "
                f"{self.records.family} task at its smallest size ({smallest}) needs more than {target - reserve} "
                f"tokens (the length less reserve_tokens {reserve})"
            )
        built, prompt, tokens, exact = at(size)
        question = built.question if built.question is not None else draft.question
        expected, data = [*draft.expected, *built.expected], {**draft.data, **built.data}
        return fitted_prompt(
            slot, prompt, (tokens, exact), reserve, self.stats, question, expected, data, {"size": size}
        )

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
                return model.prompt_tokens(sized_prompt(model, system_prompt, search.build(size(k))))[0]

            last = None if sized.limit is None else (sized.limit - search.first) // search.step + 1
            k = largest_within(count, room, 1, last, self._searched.get(key[1:])) if last is None or last >= 1 else 0
            self._searched[key[1:]] = k or None
            searched = self._sizes[key] = size(k) if k else 0
        return searched


def _builds(slot: ModelSlot, draft: Draft, sized: Sized) -> Callable[[int], Build]:
    """The draft's build at a size, with its prompt and count, each size built once."""
    model, system_prompt = slot.model, system(slot, draft)
    tried: dict[int, Build] = {}

    def at(size: int) -> Build:
        if size not in tried:
            built = sized.build(size)
            prompt = sized_prompt(model, system_prompt, built)
            tried[size] = (built, prompt, *model.prompt_tokens(prompt))
        return tried[size]

    return at
