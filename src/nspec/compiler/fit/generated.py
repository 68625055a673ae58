"""What the two kinds of context a family makes without a haystack share — `Sized` (`fit.sized`) and `Fixed`
(`fit.fixed`): the system prompt and the cell's measures of a whole prompt."""

from __future__ import annotations

from typing import Any

from nspec.prompt import Prompt
from nspec.templates import render

from ..models import ModelSlot
from ..stats import CompileStats
from ..tasks import Draft
from .measure import Fitted, estimated, reference_tokens


def system(slot: ModelSlot, draft: Draft) -> str | None:
    """The slot's system prompt, its {question} the draft's."""
    prompt = slot.prompt
    return render(prompt["system"], {"question": draft.question}) if "system" in prompt else None


def fitted_prompt(
    slot: ModelSlot,
    prompt: Prompt,
    counted: tuple[int, bool],
    reserve: int,
    stats: CompileStats,
    question: str,
    expected: list[str],
    data: dict[str, Any],
    extra: dict[str, Any],
) -> Fitted:
    """A whole prompt (as sent) fitted at the slot's length, with its count (``counted``: tokens, exact)."""
    model = slot.model
    tokens, exact = counted
    if model.counter is not None and exact:
        how: dict[str, Any] = {"counted_by": model.counter.known.counted_by}
    else:
        if model.counter is not None:
            stats.uncounted[model.label] += 1
        how = estimated(model, slot.length, reserve, stats) if not exact else {"counted_by": model.tokenizer.name}
    context = model.tokenizer.scale(sum(model.tokenizer.own_count(t.text) for t in prompt.turns))
    return Fitted(
        prompt=prompt,
        tokens=tokens,
        exact=exact,
        reserve=reserve,
        counted=how,
        haystack_tokens=context,
        reference_tokens=reference_tokens(prompt.texts()),
        question=question,
        expected=expected,
        data=data,
        extra=extra,
    )
