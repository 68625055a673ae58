"""What every RULER generator returns, and RULER's way of meeting a length: the largest size that fits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Built:
    """One sample of a RULER task at one size.

    ``text`` is the user turn: RULER's template filled with the context and the query, without the answer prefix;
    ``answer_prefix`` is what RULER puts after it for the model to continue (an assistant prefill where a provider
    takes one); ``expected`` are RULER's outputs for the sample, computed from the context that was built.
    """

    text: str
    answer_prefix: str
    expected: list[str]
    data: dict[str, Any] = field(default_factory=dict)


def largest_fitting(fits: Callable[[int], bool], step: int, limit: int | None = None) -> int:
    """The largest multiple of ``step`` for which ``fits`` holds, not above ``limit`` when one is given; 0 when even
    ``step`` does not fit.

    ``fits`` must be monotone (true up to some size, false beyond): a larger size, a longer context. RULER grows its
    size by ``step`` until the next one overflows; this finds the same size by doubling then bisecting, in O(log n)
    calls of ``fits`` (each one builds and counts a whole context).
    """
    if step <= 0:
        raise ValueError("step must be positive")

    def ok(units: int) -> bool:
        return (limit is None or units * step <= limit) and fits(units * step)

    if not ok(1):
        return 0
    low, high = 1, 2  # ok(low) holds; ok(high) is unknown until tested
    while ok(high):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        if ok(middle):
            low = middle
        else:
            high = middle
    return low * step
