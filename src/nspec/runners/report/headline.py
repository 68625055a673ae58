"""A family's headline table, `<name>.md` and `<name>.json` beside the page: RULER's results table (its README and
paper, Table 3), made for any family that declares one (`view.Table`) over the values of one of its axes.

- Per model and length, each value of the axis scores the run's metric over its graded cells (x 100 for a metric
  shown as a percentage, rounded to 2 decimals as RULER rounds its task scores); the length's score is their mean,
  each value weighing the same, as RULER averages its tasks.
- Avg. is the mean over the lengths; wAvg. (inc) and (dec) weigh the lengths 1, 2, ..., n from the shortest (inc)
  or from the longest (dec).
- The effective length (paper §4 and Table 3) is "the maximum length passing this threshold", the threshold being
  `report.effective_length_threshold` (RULER's is Llama-2-7B's score at 4K, 85.6), a score equal to it passing.
  Nothing in the definition asks every shorter length to pass too, so none is asked here; in RULER's published
  table no model passes at a length after failing at a shorter one, so the two readings never differ there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nspec.runners.report import notation
from nspec.runners.report.data import ReportData

Scores = Mapping[str, Mapping[int, Mapping[str, float]]]  # model → length → value of the axis → score
HEAD = "|Model|Effective Length|"  # how a headline table's Markdown starts (and is told from other files)


def longest_at(scores: Mapping[int, float], threshold: float) -> int | None:
    """The longest length whose score is at least ``threshold``; None when none is."""
    return max((length for length, score in scores.items() if score >= threshold), default=None)


def weighted_average(scores: Mapping[int, float], increasing: bool) -> float:
    """RULER's wAvg: weights 1..n over the lengths from the shortest (``increasing``) or from the longest."""
    lengths = sorted(scores)
    weights = range(1, len(lengths) + 1) if increasing else range(len(lengths), 0, -1)
    return sum(w * scores[length] for w, length in zip(weights, lengths, strict=True)) / sum(weights)


def _mean(values: Mapping[Any, float]) -> float:
    return sum(values.values()) / len(values)


@dataclass(frozen=True)
class Row:
    """One model's row, written: the effective length, each length's score (None where it has none) and whether it
    passes, the average and the two weighted averages, to one decimal."""

    model: str
    effective: str
    scores: list[tuple[str, bool] | None]
    average: str
    increasing: str
    decreasing: str


def rows(models: Scores, threshold: float) -> tuple[list[int], list[Row]]:
    """The table's lengths, and its rows (one per model)."""
    lengths = sorted({length for by_length in models.values() for length in by_length})
    out = []
    for model, by_length in models.items():
        scores = {length: _mean(values) for length, values in by_length.items()}
        out.append(
            Row(
                model,
                notation.effective(longest_at(scores, threshold), sorted(scores)),
                [(f"{scores[n]:.1f}", scores[n] >= threshold) if n in scores else None for n in lengths],
                f"{_mean(scores):.1f}",
                f"{weighted_average(scores, True):.1f}",
                f"{weighted_average(scores, False):.1f}",
            )
        )
    return lengths, out


def markdown(models: Scores, threshold: float) -> str:
    """The table in Markdown, as RULER's README prints it: scores at or above ``threshold`` underlined."""
    lengths, table = rows(models, threshold)
    head = ["Model", "Effective Length", *map(notation.length, lengths), "Avg.", "wAvg. (inc)", "wAvg. (dec)"]
    lines = ["|" + "|".join(head) + "|", "|" + "|".join([":---:"] * len(head)) + "|"]
    for row in table:
        cells = ["-" if s is None else f"<ins>{s[0]}</ins>" if s[1] else s[0] for s in row.scores]
        written = [row.model, row.effective, *cells, row.average, row.increasing, row.decreasing]
        lines.append("|" + "|".join(written) + "|")
    return "\n".join(lines)


def scores_of(data: ReportData, axis: str) -> dict[str, dict[int, dict[str, float]]]:
    """Per model, length and value of ``axis``: the metric's score of the graded cells (see the module's doc)."""
    times = scale(data)
    out: dict[str, dict[int, dict[str, float]]] = {}
    for row in sorted(data.values, key=lambda r: (r["model"], r["context_length"], r["value"])):
        if row["axis"] == axis and row["score"] is not None:
            by_value = out.setdefault(row["model"], {}).setdefault(row["context_length"], {})
            by_value[row["value"]] = times * round(row["score"], 4)
    return out


def scale(data: ReportData) -> int:
    """What the run's metric is multiplied by in tables (and the threshold with it): 100 for a percentage."""
    return 100 if data.metric.percent else 1


def summary(data: ReportData, threshold: float) -> dict[str, Any] | None:
    """The family's headline table as data (`<name>.json`, with its Markdown as `table`): per model the score of
    each value per length, each length's average, the effective length; None for a family that declares none, or a
    run with no graded cell."""
    table = data.view.table
    scores = scores_of(data, table.axis) if table is not None else {}
    if not scores:
        return None
    bar = scale(data) * threshold
    models = {}
    for model, by_length in scores.items():
        averages = {n: _mean(values) for n, values in by_length.items()}
        effective = longest_at(averages, bar)
        models[model] = {
            "effective_length": effective,
            "effective_label": notation.effective(effective, sorted(averages)),
            "lengths": {
                str(n): {"tasks": {v: round(s, 2) for v, s in values.items()}, "average": round(averages[n], 2)}
                for n, values in by_length.items()
            },
            "average": round(_mean(averages), 2),
        }
    return {"threshold": round(bar, 2), "models": models, "table": markdown(scores, bar)}
