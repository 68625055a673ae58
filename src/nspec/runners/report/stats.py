"""The numbers a report stands on: Wilson intervals for pass rates, RULER's effective length with its uncertainty,
McNemar's exact test for two runs graded on the same cells, and Fisher's exact test for two groups of cells."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

Z95 = 1.959963984540054


def wilson(passes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a pass rate: honest at 0 and 1 and for small n, unlike p ± z·se."""
    if n == 0:
        return 0.0, 1.0
    p = passes / n
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, center - half), min(1.0, center + half)


def rate_row(passes: int, n: int, **keys: Any) -> dict[str, Any]:
    """A pass rate with its count and Wilson interval, under ``keys``."""
    low, high = wilson(passes, n)
    return {
        **keys,
        "n": n,
        "passes": passes,
        "rate": passes / n if n else 0.0,
        "ci_low": round(low, 4),
        "ci_high": round(high, 4),
    }


def effective_length(rows: list[dict[str, Any]], threshold: float) -> dict[str, int | None]:
    """RULER's effective length of one model: the longest length whose pass rate stays at or above ``threshold`` at
    that length and every shorter one; `low` and `high` are the same with the Wilson 95% bounds instead of the rate
    (the length the data are sure of, and the longest it admits). None: not even the shortest length."""

    def longest(key: str) -> int | None:
        best = None
        for row in sorted(rows, key=lambda r: r["context_length"]):
            if row[key] < threshold:
                break
            best = row["context_length"]
        return best

    return {"length": longest("rate"), "low": longest("ci_low"), "high": longest("ci_high")}


def model_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The largest length at which every depth passes every time, and the overall pass rate with its interval."""
    by_length: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_length[row["context_length"]].append(row)
    perfect = [length for length, group in by_length.items() if all(r["passes"] == r["n"] for r in group)]
    passes, n = sum(r["passes"] for r in rows), sum(r["n"] for r in rows)
    low, high = wilson(passes, n)
    return {
        "all_depths_pass_up_to": max(perfect) if perfect else None,
        "passes": passes,
        "n": n,
        "rate": passes / n if n else None,
        "ci_low": low,
        "ci_high": high,
    }


def mcnemar(only_first: int, only_second: int) -> float:
    """The two-sided exact McNemar p-value for paired pass/fail outcomes: ``only_first`` cells pass in the first
    run and fail in the second, ``only_second`` the reverse. Under no change each discordant cell is a fair coin;
    the p-value is the chance of a split at least this uneven (1.0 when nothing is discordant)."""
    n = only_first + only_second
    if n == 0:
        return 1.0
    k = min(only_first, only_second)
    # P(X <= k) for X ~ Binomial(n, 1/2), summed in log space so that large n stays exact enough.
    log_half = n * math.log(0.5)
    tail = sum(
        math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half) for i in range(k + 1)
    )
    return min(1.0, 2 * tail)


def fisher_exact(passes_a: int, n_a: int, passes_b: int, n_b: int) -> float:
    """The two-sided Fisher exact p-value that two groups of cells (say, those sent cached and the control arm) pass
    at the same rate: the chance, with the margins fixed, of a table no more likely than the one seen."""
    passes, n = passes_a + passes_b, n_a + n_b
    if n_a == 0 or n_b == 0 or passes in (0, n):
        return 1.0

    def log_p(k: int) -> float:  # hypergeometric: k of the passes fall in group a
        return _log_choose(n_a, k) + _log_choose(n_b, passes - k) - _log_choose(n, passes)

    seen = log_p(passes_a)
    low, high = max(0, passes - n_b), min(passes, n_a)
    total = sum(math.exp(log_p(k)) for k in range(low, high + 1) if log_p(k) <= seen + 1e-9)
    return min(1.0, total)


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
