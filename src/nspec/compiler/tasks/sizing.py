"""What a generated context is built as (`Built`), and RULER's way of meeting a length: the largest size that fits.

A family whose contexts grow with a size (`Sized` drafts: RULER's generators, GraphWalks' graphs, MRCR's
conversations, a third party's) returns a `Built` from its build; the framework finds the size with
`largest_fitting` (the largest multiple of a step) or `largest_within` (RULER's search over a grid of sizes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nspec.prompt import Turn

NEVER = 2**40  # a size no context reaches: a search that gets there has a count that does not grow
OVERSHOOT = 1024  # how far past the largest size known to fit a search may guess: RULER's first guess, from its
# smallest size, lands a few hundred times further; a count that grows faster than a line must not send it far beyond


@dataclass(frozen=True)
class Built:
    """One generated context at one size.

    ``text`` is the last user turn (for RULER: its template filled with the context and the query, without the
    answer prefix); ``answer_prefix`` is what follows it for the model to continue (an assistant prefill where a
    provider takes one); ``expected`` are the answers, computed from the context that was built. ``history`` holds
    the turns of a conversation before that user turn (MRCR's exchanges), user first. ``question`` is the question
    as this build asks it (the node a GraphWalks graph asks about, the keys a RULER sample asks for): it replaces
    the draft's on the cell, so the cell says what was sent.

    A build says when no reply could fail or pass it (``unscorable``: why — its expected answer is empty, or does
    not occur in its context): compile refuses such a cell, located, instead of making it. Where the family drew
    part of it again, seeded, because an earlier draw was so (``redrawn``: how many draws it set aside), the manifest
    and plan count the cell as redrawn.
    """

    text: str
    answer_prefix: str
    expected: list[str]
    data: dict[str, Any] = field(default_factory=dict)
    history: tuple[Turn, ...] = ()
    question: str | None = None
    unscorable: str | None = None
    redrawn: int = 0


class NotGrowing(ValueError):
    """A size search that reached `NEVER`: the family's context does not grow with its size (a parameter that makes
    its count stand still, such as a Zipf law too flat to place a word)."""


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
            if low * step >= NEVER:
                raise NotGrowing(f"a size of {low * step:,} still fits: the context does not grow with the size")
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
    """The largest whole size from ``lowest`` (or ``limit``, when it is lower, as RULER's bounds have it) up to
    ``limit`` whose ``count`` is within ``room``; 0 when even the lowest one's is not. RULER binary-searches this
    size once per task and length.

    ``count`` must not fall as the size grows. A prompt's tokens grow almost linearly in it, so each guess is where
    the line through the two nearest sizes counted so far meets ``room`` (through nothing and the one size, at
    first): a handful of calls of ``count`` (each builds and counts a whole context) instead of a binary search's
    twenty. Where guesses leave more than half of what is left to search (two more such than not), or the line
    does not rise, the next one bisects it, so the worst case stays logarithmic; no guess goes past ``OVERSHOOT``
    times the largest size known to fit. ``near``, a size the answer is likely close to (another model's, on the
    same sample), is counted first: two calls when it is right, and the same answer whatever it is.
    """
    if limit is not None and limit < lowest:
        lowest = limit
    counts: dict[int, int] = {}
    low: int | None = None  # the largest size known to fit
    high: int | None = None  # the smallest size known not to
    stalls = 0  # guesses that left more than half of what was left, less those that did not

    def meets(a: int, b: int | None, default: int) -> int:
        """The size where the line through sizes ``a`` and ``b`` (or through nothing, at 0) reaches ``room``,
        rounded down; ``default`` where the line does not rise."""
        kb, cb = (0, 0) if b is None else (b, counts[b])
        slope = (counts[a] - cb) / (a - kb)
        return math.floor(a + (room - counts[a]) / slope) if slope > 0 else default

    guess = lowest if near is None else max(lowest, near if limit is None else min(near, limit))
    while True:
        floor = lowest - 1 if low is None else low  # below it, every size fits (none, below ``lowest``)
        left = None if high is None else high - floor
        counts[guess] = count(guess)
        if counts[guess] <= room:
            low = guess if low is None else max(low, guess)
        else:
            high = guess if high is None else min(high, guess)
        if high is not None:
            floor = lowest - 1 if low is None else low
            if high - floor <= 1:
                return 0 if low is None else low
            stalls = stalls + 1 if left is not None and (high - floor) * 2 > left else max(0, stalls - 1)
            middle = (floor + high + 1) // 2
        if low is None:  # every size counted overflows: go down, to nothing below ``lowest``
            assert high is not None
            below = sorted(counts)[:2]
            line = meets(below[0], below[1] if len(below) > 1 else None, middle)
            guess = middle if stalls >= 2 else max(lowest, min(high - 1, line))
        elif high is None:  # every size counted fits: go up, to ``limit``
            if limit is not None and low >= limit:
                return limit
            if low >= NEVER:
                raise NotGrowing(f"a size of {low:,} still fits {room:,}: the count does not grow with the size")
            above = sorted(counts)[-2:]
            line = meets(above[-1], above[0] if len(above) > 1 else None, 2 * low)
            guess = max(low + 1, min(OVERSHOOT * low, line))
            guess = guess if limit is None else min(limit, guess)
        else:
            guess = middle if stalls >= 2 else max(low + 1, min(high - 1, meets(high, low, middle)))
