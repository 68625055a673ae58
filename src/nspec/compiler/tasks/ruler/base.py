"""What every RULER generator returns, and RULER's way of meeting a length: the largest size that fits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nspec.prompt import Turn


@dataclass(frozen=True)
class Built:
    """One sample of a RULER task at one size.

    ``text`` is the user turn: RULER's template filled with the context and the query, without the answer prefix;
    ``answer_prefix`` is what RULER puts after it for the model to continue (an assistant prefill where a provider
    takes one); ``expected`` are RULER's outputs for the sample, computed from the context that was built.
    ``history`` holds the turns of a conversation before that user turn (MRCR's exchanges), user first; RULER's
    have none.
    """

    text: str
    answer_prefix: str
    expected: list[str]
    data: dict[str, Any] = field(default_factory=dict)
    history: tuple[Turn, ...] = ()


def largest_fitting(fits: Callable[[int], bool], step: int, limit: int | None = None, near: int | None = None) -> int:
    """The largest multiple of ``step`` for which ``fits`` holds, not above ``limit`` when one is given; 0 when even
    ``step`` does not fit.

    ``fits`` must be monotone (true up to some size, false beyond): a larger size, a longer context. RULER grows its
    size by ``step`` until the next one overflows; this finds the same size by galloping then bisecting, in O(log n)
    calls of ``fits`` (each one builds and counts a whole context). ``near``, a size the answer is likely close to
    (the last sample's at the same length), starts the gallop there: two or three calls when it is right, and the
    same answer whatever it is.
    """
    if step <= 0:
        raise ValueError("step must be positive")

    def ok(units: int) -> bool:
        return (limit is None or units * step <= limit) and fits(units * step)

    start = max(1, (near or step) // step)
    if ok(start):  # gallop up from a size that fits to one that does not
        low, jump = start, 1
        while ok(low + jump):
            low, jump = low + jump, jump * 2
        high = low + jump
    else:  # gallop down from a size that does not fit to one that does (or to nothing)
        high, jump = start, 1
        while high - jump >= 1 and not ok(high - jump):
            high, jump = high - jump, jump * 2
        low = high - jump
        if low < 1:
            if high == 1 or not ok(1):
                return 0
            low = 1
    while high - low > 1:  # ok(low) holds, ok(high) does not
        middle = (low + high) // 2
        if ok(middle):
            low = middle
        else:
            high = middle
    return low * step
