"""Expansion of the grid's axes (context lengths and depths) from lists or ranges."""

from __future__ import annotations

import math
from typing import Any


def _linspace(start: float, stop: float, steps: int) -> list[float]:
    if steps == 1:
        return [float(start)]
    return [start + (stop - start) * i / (steps - 1) for i in range(steps)]


def _round_half_even(x: float) -> int:
    # numpy.round (used by needlehaystack) rounds halves to even, and so does Python's round().
    return round(x)


def context_lengths(axis: list[int] | dict[str, Any]) -> list[int]:
    """The context lengths of a grid, in the order given (ranges ascend from `from` to `to`)."""
    if isinstance(axis, list):
        return list(axis)
    start, stop, steps = axis["from"], axis["to"], axis["steps"]
    if axis.get("spacing", "linear") == "log":
        return [_round_half_even(math.exp(v)) for v in _linspace(math.log(start), math.log(stop), steps)]
    return [_round_half_even(v) for v in _linspace(start, stop, steps)]


def depths(axis: list[float] | dict[str, Any]) -> list[float]:
    """The depths (percent) of a grid. Ranges follow needlehaystack: linear values are rounded to integers;
    sigmoid values are 100 / (1 + e^(0.1 (x - 50))) over the linear points, rounded to 3 decimals, ends kept."""
    if isinstance(axis, list):
        return [float(d) for d in axis]
    start, stop, steps = float(axis.get("from", 0)), float(axis.get("to", 100)), axis["steps"]
    points = _linspace(start, stop, steps)
    if axis.get("spacing", "linear") == "linear":
        return [float(_round_half_even(p)) for p in points]
    out = []
    for p in points:
        if p in (0.0, 100.0):
            out.append(p)
        else:
            out.append(round(100 * (1 / (1 + math.exp(0.1 * (p - 50)))), 3))
    return sorted(out)
