"""What every RULER generator returns, and RULER's way of meeting a length: the largest size that fits."""

from __future__ import annotations

import math
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


def largest_within(count: Callable[[int], int], room: int, lowest: int = 1, limit: int | None = None) -> int:
    """The largest whole size from ``lowest`` up (to ``limit`` when one is given) whose ``count`` is within
    ``room``; 0 when even ``lowest``'s is not. RULER binary-searches this size once per task and length.

    ``count`` must grow with the size. A prompt's tokens grow almost linearly in it, so each guess interpolates
    between the sizes counted so far (extrapolates, before one overflows): a handful of calls of ``count`` (each
    builds and counts a whole context) instead of a binary search's twenty. A guess that closes less than half of
    the interval is followed by a bisection, so the worst case stays logarithmic.
    """
    low = lowest if limit is None else min(lowest, limit)
    at_low = count(low)
    if at_low > room:
        return 0
    high: int | None = None  # the smallest size known to overflow
    at_high = 0
    previous: tuple[int, int] | None = None  # the last size that fitted before ``low``, for the slope
    bisect = False
    while high is None or high - low > 1:
        if high is None:
            if limit is not None and low >= limit:
                return limit
            slope = (at_low - previous[1]) / (low - previous[0]) if previous else at_low / low
            guess = low + max(1, math.ceil((room - at_low) / max(slope, 1e-9)) + 1)
            if limit is not None and guess >= limit:
                guess = limit
        elif bisect:
            guess = (low + high) // 2
        else:
            guess = low + round((room - at_low) * (high - low) / max(at_high - at_low, 1))
        guess = max(low + 1, guess if high is None else min(high - 1, guess))
        width = None if high is None else high - low
        at_guess = count(guess)
        if at_guess <= room:
            previous, (low, at_low) = (low, at_low), (guess, at_guess)
        else:
            high, at_high = guess, at_guess
        bisect = width is not None and high is not None and (high - low) * 2 > width
    return low
