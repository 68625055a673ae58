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


def largest_within(
    count: Callable[[int], int], room: int, lowest: int = 1, limit: int | None = None, near: int | None = None
) -> int:
    """The largest whole size from ``lowest`` up (to ``limit`` when one is given) whose ``count`` is within
    ``room``; 0 when even ``lowest``'s is not. RULER binary-searches this size once per task and length.

    ``count`` must grow with the size. A prompt's tokens grow almost linearly in it, so each guess is where the line
    through the two nearest sizes counted so far meets ``room`` (through nothing and the one size, at first): a
    handful of calls of ``count`` (each builds and counts a whole context) instead of a binary search's twenty.
    Where two guesses in a row each leave more than half of the interval, the next one bisects it, so the worst
    case stays logarithmic. ``near``, a size the answer is likely close to (another model's, on the same sample),
    is counted first: two calls when it is right, and the same answer whatever it is.
    """
    if limit is not None and limit < lowest:
        lowest = limit
    counts: dict[int, int] = {}
    low: int | None = None  # the largest size known to fit
    high: int | None = None  # the smallest size known not to
    stalls = 0  # guesses in a row that left more than half of the interval

    def meets(a: int, b: int | None, default: int) -> int:
        """The size where the line through sizes ``a`` and ``b`` (or through nothing, at 0) reaches ``room``,
        rounded down; ``default`` where the line does not rise."""
        kb, cb = (0, 0) if b is None else (b, counts[b])
        slope = (counts[a] - cb) / (a - kb)
        return math.floor(a + (room - counts[a]) / slope) if slope > 0 else default

    guess = lowest if near is None else max(lowest, near if limit is None else min(near, limit))
    while True:
        width = None if low is None or high is None else high - low
        counts[guess] = count(guess)
        if counts[guess] <= room:
            low = guess if low is None else max(low, guess)
        else:
            high = guess if high is None else min(high, guess)
        if low is None:  # every size counted overflows: go down, to nothing below ``lowest``
            assert high is not None
            if high <= lowest:
                return 0
            below = sorted(counts)[:2]
            guess = max(lowest, min(high - 1, meets(below[0], below[1] if len(below) > 1 else None, high - 1)))
        elif high is None:  # every size counted fits: go up, to ``limit``
            if limit is not None and low >= limit:
                return limit
            above = sorted(counts)[-2:]
            guess = max(low + 1, meets(above[-1], above[0] if len(above) > 1 else None, 2 * low))
            guess = guess if limit is None else min(limit, guess)
        else:
            if high - low <= 1:
                return low
            stalls = stalls + 1 if width is not None and (high - low) * 2 > width else 0
            middle = (low + high) // 2
            guess = middle if stalls >= 2 else max(low + 1, min(high - 1, meets(high, low, middle)))
