"""`Fixed` drafts: a prompt the family brings whole, placed at the smallest grid length it fits."""

from __future__ import annotations

import json
from collections.abc import Sequence

from nspec.compiler.providers.contract import as_sent
from nspec.prompt import Prompt

from ..models import ModelSlot
from ..stats import CompileStats
from ..tasks import Draft, Fixed
from .generated import fitted_prompt, system
from .measure import Fitted


class FixedFitter:
    """Places the `Fixed` drafts of a compile: each prompt counted once per model, made into a cell at the smallest
    of ``lengths`` the model takes that holds it with its answer budget; one that fits none is counted, once, as
    unplaced (one whose characters alone fit none is not tokenised)."""

    def __init__(self, lengths: Sequence[int], stats: CompileStats) -> None:
        self.lengths, self.stats = list(lengths), stats
        self._tokens: dict[tuple[str, ...], tuple[int, bool]] = {}  # a draft's count, per model

    def fit(self, slot: ModelSlot, draft: Draft, fixed: Fixed) -> Fitted | None:
        """The draft fitted if the slot's length is the smallest grid length it fits; None otherwise."""
        model = slot.model
        reserve = slot.reserve
        prompt = as_sent(model.api, model.entry, Prompt(system(slot, draft), fixed.turns, fixed.prefix))
        key = (
            model.label,
            str(slot.variant),
            str(slot.trial),
            json.dumps([slot.point, draft.identity], sort_keys=True),
        )
        lengths = [n for n in self.lengths if model.max_context is None or n <= model.max_context]
        if key not in self._tokens:  # a prompt too long for every length by its characters is not tokenised
            self._tokens[key] = model.prompt_tokens(prompt, max(lengths, default=0) - reserve)
        tokens, exact = self._tokens[key]
        room = (lambda n: n) if exact else (lambda n: model.fit_target(n, reserve))
        home = min((n for n in lengths if tokens + reserve <= room(n)), default=None)
        if home is None and slot.length == max(lengths):
            self.stats.unplaced[model.label] += 1
        if home != slot.length:
            return None
        return fitted_prompt(
            slot, prompt, (tokens, exact), reserve, self.stats, draft.question, draft.expected, draft.data, {}
        )
