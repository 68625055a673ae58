"""What a report is made of, read from run directories a cell at a time.

`joined` streams every cell of a run with its result, score and request line: cells.jsonl is read in order, the
results and scores files are indexed by byte offset (a record is parsed only when its cell comes), and each model's
request shards are read alongside, in the order they were written. `collect` folds that stream into the aggregates
the page and the charts show; `CellExport` writes the tidy per-cell table and the cell browser's data as it passes.
Memory holds the aggregates and the offsets, never a run.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from nspec.compiler.prices import Lane, Price, Usage, price_for
from nspec.compiler.providers.registry import provider
from nspec.records import CellRecord, ResultRecord, ScoreRecord
from nspec.runners.grading.audit import dissent
from nspec.runners.grading.builtin import RunningMean
from nspec.runners.grading.grader import DEFAULT_SCORING
from nspec.runners.grading.judging import SCORED
from nspec.runners.report import view as views
from nspec.runners.report.stats import fisher_exact, mcnemar, rate_row, wilson
from nspec.runners.report.view import View, axis_value, field_value, view_of
from nspec.runners.run_store import LineIndex, Run, checked_result, shard_lines
from nspec.scorers import Accumulator, Metric, metric_of

EXCERPT_CHARACTERS = 500  # of context shown before and after a needle in the cell browser
ANSWER_CHARACTERS = 4000  # of an answer (and of a judge's reply) kept for the browser; the CSV keeps all

# Why a negative control (no needle) was answered wrongly, from its verdict's reason.
NEGATIVE_REASONS = {
    "invents a value": "invented a value",
    "does not say the answer is missing": "did not say not found",
}
JUDGED_WRONG = "judged wrong"


@dataclass(frozen=True)
class Joined:
    """One cell with what became of it."""

    cell: CellRecord
    result: ResultRecord | None
    score: ScoreRecord | None
    request: dict[str, Any] | None


def joined(run: Run) -> Iterator[Joined]:
    """Every cell of ``run`` in order, with its result, score and compiled request line."""
    requests = {m.label: _requests(run, [s["file"] for s in m.shards]) for m in run.models()}
    with LineIndex(run.paths.results("answers"), checked_result) as results, LineIndex(run.paths.scores) as scores:
        for cell in run.cells():
            cid = cell["cell_id"]
            request = next((line for found, line in requests[cell["model"]] if found == cid), None)
            yield Joined(cell, results.get(cid), scores.get(cid), request)


def _requests(run: Run, shards: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    for shard in shards:
        for cid, raw in shard_lines(run.path / shard):
            yield cid, json.loads(raw)


@dataclass
class Tally:
    """What a model's cells add up to beyond pass and fail."""

    cells: int = 0  # scored cells, controls included
    undecided: int = 0  # no scorer decided and no judge was asked
    judge_errors: int = 0  # too few judges gave a verdict
    scored: int = 0  # graded by score-10 judges without a threshold: a score, no verdict
    errors: int = 0  # the request got no answer
    judged: int = 0  # cells with two or more judge votes
    split: int = 0  # of those, cells whose judges did not all agree
    needles_found: RunningMean = field(default_factory=RunningMean)  # multi-needle cells: the share found
    judge_scores: RunningMean = field(default_factory=RunningMean)  # score-10 judges: each cell's mean score
    negative_reasons: Counter[str] = field(default_factory=Counter)
    rules: Counter[str] = field(default_factory=Counter)  # graded cells by the scorer rule that decided them
    cost: float | None = 0.0  # of the answers' tokens; None when the model has no known price
    estimate: float | None = 0.0  # the plan's, at the model's mode (every answer its full budget)


@dataclass
class Comparison:
    """Two runs' verdicts on the cells they share, per model."""

    first: str
    second: str
    model: str
    shared: int
    first_passes: int
    second_passes: int
    only_first: int  # pass in the first run, fail in the second
    only_second: int
    p_value: float
    flipped: list[dict[str, Any]]  # the discordant cells (the first few hundred)


@dataclass
class ReportData:
    view: View  # what the first run's family says its cells are
    metric: Metric  # what the first run's scores aggregate by: its first scorer's metric
    heat: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # score-10 judges without a threshold: per model, the mean score per length and depth (needlehaystack's heatmap)
    score_heat: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    lengths: list[dict[str, Any]] = field(default_factory=list)
    locations: list[dict[str, Any]] = field(default_factory=list)
    negatives: list[dict[str, Any]] = field(default_factory=list)  # false-positive rate per model and length
    negative_reasons: list[dict[str, Any]] = field(default_factory=list)  # the same, split by reason
    dissent: list[dict[str, Any]] = field(default_factory=list)
    costs: list[dict[str, Any]] = field(default_factory=list)
    tallies: dict[str, Tally] = field(default_factory=dict)
    comparisons: list[Comparison] = field(default_factory=list)
    cache_arms: list[dict[str, Any]] = field(default_factory=list)  # per model: cached cells against the control arm
    # Per model, length and point of the task's axes (cells of a family's own axes, or without a depth): the pass
    # rate and the score under the metric (a scorer that is not pass/fail, RULER's string_match_all, gives shares).
    scores: list[dict[str, Any]] = field(default_factory=list)
    # The same per value of each of those axes ("axis", "value"; cells with no axes under the axis None, value
    # "all"), and of the headline table's axis.
    values: list[dict[str, Any]] = field(default_factory=list)
    model_scores: dict[str, float | None] = field(default_factory=dict)  # per model, over its graded cells
    axis_values: dict[str, list[str]] = field(default_factory=dict)  # per axis of the view: its scored cells' values

    @property
    def models(self) -> list[str]:
        """Every model label, in a fixed order (the colours follow it)."""
        return sorted(set(self.heat) | set(self.score_heat) | set(self.tallies))


def run_labels(runs: list[Run]) -> list[str]:
    """How each run is named beside its models when several are compared (the same run twice stays two)."""
    base = [f"{r.spec['name']}/{r.run_id[:6]}" for r in runs]
    return [f"{b}#{i + 1}" if base.count(b) > 1 else b for i, b in enumerate(base)]


def model_label(cell: CellRecord, run_label: str | None) -> str:
    label = cell["model"] + (f" ({cell['prompt']})" if cell["prompt"] else "")
    return f"{label} · {run_label}" if run_label else label


class Prices:
    """Each run's models' prices and modes, looked up once."""

    def __init__(self, run: Run) -> None:
        entries = {m.get("name", m["id"]): m for m in run.spec["models"]}
        self.by_model: dict[str, Price | None] = {
            m["label"]: price_for(m["id"], entries[m["label"]].get("price")) for m in run.manifest["models"]
        }
        self.lane: dict[str, Lane] = {
            m["label"]: "batch" if m["mode"] == "batch" else "flex" if m["mode"] == "flex" else "live"
            for m in run.manifest["models"]
        }
        self.costing = run.costing()

    def cost(self, model: str, result: ResultRecord | None) -> float | None:
        """What the answer cost as billed (0 without an answer); None when the model has no known price."""
        if self.by_model.get(model) is None:
            return None
        if result is None:
            return 0.0
        return self.costing(model, str(result["source"]["kind"]), Usage.of(dict(result["usage"])))

    def estimate(self, cell: CellRecord) -> float | None:
        """The plan's estimate for the cell: its compiled prompt (with the cache reads and writes its shape
        expects) and a full answer budget, at its model's lane."""
        price = self.by_model.get(cell["model"])
        if price is None:
            return None
        shape = cell.get("cache") or {}
        write, hour = shape.get("write_tokens", 0), shape.get("ttl") == "1h"
        usage = Usage(
            cell["context_length"]["prompt"],
            cell["max_tokens"],
            shape.get("read_tokens", 0),
            0 if hour else write,
            write if hour else 0,
        )
        return price.cost(usage, self.lane[cell["model"]])


def pair_key(cell: CellRecord) -> tuple[Any, ...]:
    """What a cell is, apart from the model and the run: how cells of two runs are paired."""
    ids = tuple(n["id"] for n in cell["needles"])
    return (
        cell["context_length"]["target"],
        cell["depth"]["requested"],
        cell["trial"],
        cell["repeat"],
        cell["item"],
        ids,
        json.dumps(cell.get("axes"), sort_keys=True),
    )


class Aggregates:
    """The report's numbers, folded from joined cells one at a time."""

    def __init__(self, view: View, metric: Metric) -> None:
        self.data = ReportData(view, metric)
        self.heat: dict[tuple[str, int, float], list[int]] = defaultdict(lambda: [0, 0])
        self.by_length: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
        self.by_location: dict[tuple[str, float, int], list[int]] = defaultdict(lambda: [0, 0])
        self.negatives: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
        self.reasons: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
        self.found: dict[tuple[str, int, float], RunningMean] = defaultdict(RunningMean)
        self.scored: dict[tuple[str, int, float], RunningMean] = defaultdict(RunningMean)  # mean score, by place
        # per run, for comparisons: (model, what the cell is) → passed, cell id, its values of the view's axes
        self.verdicts: list[dict[tuple[str, tuple[Any, ...]], tuple[bool, str, list[str]]]] = []
        self.arms: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])  # (model, cache arm) → passes, n
        # The metric's accumulators: per model; per model, length and point of the axes (as JSON); per model,
        # length, axis and value. Each with its passes and n where it is a row of its own.
        self.by_model: dict[str, Accumulator] = defaultdict(metric.start)
        self.by_axes: dict[tuple[str, int, str], tuple[list[int], Accumulator]] = {}
        self.by_value: dict[tuple[str, int, str | None, str], tuple[list[int], Accumulator]] = {}
        self.seen: dict[str, set[str]] = defaultdict(set)  # per axis of the view: the values of scored cells

    def add(self, label: str, item: Joined, cost: float | None, estimate: float | None) -> None:
        cell, score = item.cell, item.score
        if score is None:
            return
        for axis in self.data.view.axes:
            value = axis_value(cell, axis.key)
            if value is not None:
                self.seen[axis.key].add(views.text(value))
        tally = self.data.tallies.setdefault(label, Tally())
        tally.cells += 1
        tally.cost = None if cost is None or tally.cost is None else tally.cost + cost
        tally.estimate = None if estimate is None or tally.estimate is None else tally.estimate + estimate
        if score["verdict"] != "error":
            tally.rules[decided_by(score)] += 1
        votes = [v for v in score.get("votes", []) if v.get("vote") in ("pass", "fail")]
        if len(votes) >= 2:
            tally.judged += 1
            tally.split += len({v["vote"] for v in votes}) > 1
        if "judge_score" in score:
            tally.judge_scores.add(float(score["judge_score"]))
        if score["verdict"] == SCORED:
            tally.scored += 1
            self.add_scored(label, cell, float(score["score"] or 0.0))  # a scored cell always has its score
            return
        if score["verdict"] not in ("pass", "fail"):
            if score["verdict"] == "error":
                tally.errors += 1
            elif score.get("judge_error"):
                tally.judge_errors += 1
            else:
                tally.undecided += 1
            return
        passed = score["verdict"] == "pass"
        length = cell["context_length"]["target"]
        if cell["negative"]:
            counts = self.negatives[(label, length)]
            counts[0] += not passed  # a false positive: the model answered what is not there
            counts[1] += 1
            if not passed:
                why = NEGATIVE_REASONS.get(score["reason"], JUDGED_WRONG)
                self.reasons[(label, length)][why] += 1
                tally.negative_reasons[why] += 1
            return
        depth = cell["depth"]["requested"] if self.data.view.depth else None
        arm = [self.arms[(label, cell["cache"]["arm"])]] if "cache" in cell else []
        heat = [self.heat[(label, length, depth)]] if depth is not None else []
        for counts in (*heat, self.by_length[(label, length)], *arm):
            counts[0] += passed
            counts[1] += 1
        given = score.get("score")  # (none while undecided; judges' verdicts score 1 or 0)
        self.score(label, cell, passed, float(given if given is not None else passed))
        if "needles_found" in score:
            tally.needles_found.add(score["needles_found"])
            if depth is not None:
                self.found[(label, length, depth)].add(score["needles_found"])
        if self.verdicts:
            where = [views.text(axis_value(cell, a.key)) for a in self.data.view.axes]
            self.verdicts[-1][(cell["model"], pair_key(cell))] = (passed, cell["cell_id"], where)
        if depth is not None and cell["repeat"] is not None:
            counts = self.by_location[(label, depth, cell["repeat"])]
            counts[0] += passed
            counts[1] += 1

    def add_scored(self, label: str, cell: CellRecord, score: float) -> None:
        """Fold a cell that judges scored without a verdict: into its model's score and its place of the heatmap."""
        self.by_model[label].add(score)
        if cell["depth"]["requested"] is not None and self.data.view.depth:
            self.scored[(label, cell["context_length"]["target"], cell["depth"]["requested"])].add(score)

    def score(self, label: str, cell: CellRecord, passed: bool, score: float) -> None:
        """Fold a graded cell's score under the metric: into its model's, its point of the family's axes' (cells
        with axes of their own, or without a depth), each of their values' and the headline table axis's."""
        self.by_model[label].add(score)
        axes = cell.get("axes") or {}
        if cell["depth"]["requested"] is not None and not axes:
            return
        point = (label, cell["context_length"]["target"], json.dumps(axes, sort_keys=True, ensure_ascii=False))
        values: dict[str | None, Any] = {key: value for key, value in axes.items()} or {None: "all"}
        table = self.data.view.table
        if table is not None and table.axis not in values:
            values[table.axis] = axis_value(cell, table.axis)
        rows = [_row(self.by_axes, point, self.data.metric)]
        rows += [_row(self.by_value, (*point[:2], axis, views.text(v)), self.data.metric) for axis, v in values.items()]
        for counts, accumulator in rows:
            counts[0] += passed
            counts[1] += 1
            accumulator.add(score)

    def finish(self, runs: list[Run], names: list[str | None]) -> ReportData:
        data = self.data
        for (label, length, depth), (passes, n) in sorted(self.heat.items()):
            row = rate_row(passes, n, model=label, context_length=length, depth=depth)
            row["text"] = f"{row['rate']:.2f} (n={n})"
            shares = self.found.get((label, length, depth))
            if shares is not None:
                row["needles_found"] = round(shares.total / shares.n, 4)
            data.heat.setdefault(label, []).append(row)
        for (label, length, depth), scores in sorted(self.scored.items()):
            mean = round(scores.total / scores.n, 2)
            row = {"model": label, "context_length": length, "depth": depth, "score": mean, "n": scores.n}
            data.score_heat.setdefault(label, []).append({**row, "text": f"{mean:.1f} (n={scores.n})"})
        data.lengths = [
            rate_row(p, n, model=label, context_length=length)
            for (label, length), (p, n) in sorted(self.by_length.items())
        ]
        data.scores = [
            {**rate_row(p, n, model=label, context_length=length), "axes": json.loads(axes), "score": _rounded(score)}
            for (label, length, axes), ((p, n), score) in sorted(self.by_axes.items())
        ]
        for (label, length, axis, value), ((p, n), score) in sorted(self.by_value.items(), key=_by_value):
            row = {"model": label, "context_length": length, "axis": axis, "value": value, "n": n, "passes": p}
            data.values.append({**row, "score": score.result()})
        data.model_scores = {label: score.result() for label, score in self.by_model.items()}
        data.axis_values = {key: sorted(values, key=views.sort_key) for key, values in self.seen.items()}
        data.locations = [
            rate_row(p, n, model=label, location=loc, repeat=str(rep))
            for (label, loc, rep), (p, n) in sorted(self.by_location.items())
        ]
        data.negatives = [
            rate_row(fp, n, model=label, context_length=length)
            for (label, length), (fp, n) in sorted(self.negatives.items())
        ]
        data.negative_reasons = [
            {"model": label, "context_length": length, "reason": why, "count": k, "rate": k / self.negatives[key][1]}
            for key in sorted(self.reasons)
            for label, length in [key]
            for why, k in sorted(self.reasons[key].items())
        ]
        for label in sorted({label for label, _ in self.arms}):
            cached_passes, cached = self.arms[(label, "cached")]
            control_passes, control = self.arms[(label, "control")]
            data.cache_arms.append(
                {
                    "model": label,
                    "cached": rate_row(cached_passes, cached),
                    "control": rate_row(control_passes, control),
                    "p_value": fisher_exact(cached_passes, cached, control_passes, control),
                }
            )
        for run, run_label in zip(runs, names, strict=True):
            data.dissent += [{**row, "run": run.spec["name"]} for row in dissent(run)]
            data.costs += _costs(run, run_label)
        if len(self.verdicts) > 1:
            data.comparisons = _compare(self.verdicts, [n or "" for n in names])
        return data


LEFT_BY_SCORERS = "undecided by the scorers"


def decided_by(score: ScoreRecord) -> str:
    """The scorer rule that decided a graded cell ("key-words → pass"), or `LEFT_BY_SCORERS`."""
    decisive = next((s for s in score.get("scorers", []) if s["verdict"] != "undecided"), None)
    if decisive is None:
        return LEFT_BY_SCORERS
    return f"{decisive.get('rule') or decisive['scorer']} → {decisive['verdict']}"


Row = tuple[list[int], Accumulator]  # passes and n, and the metric's accumulator


def _row(rows: dict[Any, Row], key: Any, metric: Metric) -> Row:
    if key not in rows:
        rows[key] = ([0, 0], metric.start())
    return rows[key]


def _rounded(score: Accumulator) -> float | None:
    result = score.result()
    return None if result is None else round(result, 4)


def _by_value(item: tuple[tuple[str, int, str | None, str], Row]) -> tuple[Any, ...]:
    (label, length, axis, value), _ = item
    return (label, length, axis or "", views.sort_key(value))


def _compare(
    verdicts: list[dict[tuple[str, tuple[Any, ...]], tuple[bool, str, list[str]]]], names: list[str]
) -> list[Comparison]:
    """The first run against each other, per model they share (or the one model of each, when each has one)."""
    out = []
    first = verdicts[0]
    for j, other in enumerate(verdicts[1:], 1):
        models_a = sorted({m for m, _ in first})
        models_b = sorted({m for m, _ in other})
        pairs = [(m, m) for m in models_a if m in models_b]
        if not pairs and len(models_a) == len(models_b) == 1:
            pairs = [(models_a[0], models_b[0])]
        for model_a, model_b in pairs:
            a = {key: v for (m, key), v in first.items() if m == model_a}
            b = {key: v for (m, key), v in other.items() if m == model_b}
            shared = sorted(set(a) & set(b), key=repr)
            only_first = [k for k in shared if a[k][0] and not b[k][0]]
            only_second = [k for k in shared if b[k][0] and not a[k][0]]
            flipped = [
                {
                    "context_length": k[0],
                    "axes": a[k][2],
                    "trial": k[2],
                    "first": "pass" if a[k][0] else "fail",
                    "second": "pass" if b[k][0] else "fail",
                    "first_cell": a[k][1],
                    "second_cell": b[k][1],
                }
                for k in (only_first + only_second)[:300]
            ]
            model = model_a if model_a == model_b else f"{model_a} / {model_b}"
            out.append(
                Comparison(
                    names[0],
                    names[j],
                    model,
                    len(shared),
                    sum(a[k][0] for k in shared),
                    sum(b[k][0] for k in shared),
                    len(only_first),
                    len(only_second),
                    mcnemar(len(only_first), len(only_second)),
                    flipped,
                )
            )
    return out


_LANE_NAMES = {
    "live": "estimate, live",
    "live_cache": "estimate, live + cache",
    "batch": "estimate, batch",
    "batch_cache": "estimate, batch + cache",
    "flex": "estimate, flex",
}


def _costs(run: Run, run_label: str | None) -> list[dict[str, Any]]:
    """Per model: the plan's estimates (each lane it prices) against what the answers cost as billed, and what the
    same tokens would have cost live, uncached (the list price the savings are measured against)."""
    suffix = f" · {run_label}" if run_label else ""
    prices = Prices(run)
    used: dict[str, float] = defaultdict(float)
    listed: dict[str, float] = defaultdict(float)
    tokens: dict[str, int] = defaultdict(int)
    for r in run.results():
        name = r["model"]
        used[name] += prices.cost(name, r) or 0.0
        price = prices.by_model.get(name)
        if price is not None:
            usage = Usage.of(dict(r["usage"]))
            listed[name] += price.cost(Usage(usage.input_tokens, usage.output_tokens), "live") or 0.0
        tokens[name] += r["usage"]["input_tokens"]
    rows = []
    for model in run.manifest["models"]:
        label = model["label"] + suffix
        known = prices.by_model.get(model["label"]) is not None
        estimates = [(name, model["cost_usd"].get(lane), model["input_tokens"]) for lane, name in _LANE_NAMES.items()]
        for kind, usd, count in (
            *estimates,
            ("actual, at list price", listed[model["label"]] if known else None, tokens[model["label"]]),
            ("actual", used[model["label"]] if known else None, tokens[model["label"]]),
        ):
            if usd is not None:
                rows.append({"model": label, "kind": kind, "usd": round(usd, 4), "input_tokens": count})
    return rows


def collect(runs: list[Run], export: CellExport | None = None) -> ReportData:
    """The report's numbers for ``runs`` (several are compared), streamed; ``export`` sees every cell as it passes.
    The first run's family and scoring say what its cells are and what their scores aggregate by."""
    names: list[str | None] = list(run_labels(runs)) if len(runs) > 1 else [None]
    folded = Aggregates(view_of(runs[0]), metric_of(runs[0].spec.get("scoring") or DEFAULT_SCORING))
    for run, run_label in zip(runs, names, strict=True):
        prices = Prices(run)
        if len(runs) > 1:
            folded.verdicts.append({})
        for item in joined(run):
            label = model_label(item.cell, run_label)
            cost = prices.cost(item.cell["model"], item.result)
            folded.add(label, item, cost, prices.estimate(item.cell))
            if export is not None:
                export.add(run, run_label, label, item, cost, folded.data.view)
    return folded.finish(runs, names)


# -- the per-cell export and the cell browser's data -------------------------------------------------------------

CSV_FIELDS = (
    "run",
    "cell_id",
    "model",
    "model_id",
    "prompt",
    "context_length",
    "context_length_actual",
    "prompt_tokens",
    "haystack_tokens",
    "o200k_tokens",
    "characters",
    "counted_by",
    "tokens_exact",
    "depth",
    "depth_actual",
    "trial",
    "repeat",
    "item",
    "negative",
    "needles",
    "question",
    "expected",
    "alternates",
    "max_tokens",
    "haystack_uses",
    "status",
    "answer",
    "finish_reason",
    "input_tokens",
    "output_tokens",
    "source",
    "error",
    "verdict",
    "score",
    "reason",
    "scorers",
    "votes",
    "judge_verdict",
    "judge_score",
    "judge_error",
    "needles_found",
    "cost_usd",
)


def csv_row(run: Run, run_label: str | None, item: Joined, cost: float | None) -> dict[str, Any]:
    """Every recorded field of one cell, flat: nested values as JSON."""
    cell = item.cell
    result: dict[str, Any] = dict(item.result or {})
    score: dict[str, Any] = dict(item.score or {})
    length = cell["context_length"]
    usage = result.get("usage") or {}
    return {
        "run": run_label or run.run_id,
        "cell_id": cell["cell_id"],
        "model": cell["model"],
        "model_id": cell["model_id"],
        "prompt": cell["prompt"] or "",
        "context_length": length["target"],
        "context_length_actual": length["actual"],
        "prompt_tokens": length["prompt"],
        "haystack_tokens": length["haystack"],
        "o200k_tokens": length["o200k"],
        "characters": length["characters"],
        "counted_by": length["counted_by"],
        "tokens_exact": cell["tokens_exact"],
        "depth": _blank(cell["depth"]["requested"]),
        "depth_actual": _blank(cell["depth"]["actual"]),
        "trial": cell["trial"],
        "repeat": _blank(cell["repeat"]),
        "item": _blank(cell["item"]),
        "negative": cell["negative"],
        "needles": json.dumps(cell["needles"], ensure_ascii=False),
        "question": cell["question"],
        "expected": json.dumps(cell["expected"], ensure_ascii=False),
        "alternates": json.dumps(cell["alternates"], ensure_ascii=False),
        "max_tokens": cell["max_tokens"],
        "haystack_uses": cell["haystack_uses"],
        "status": result.get("status", ""),
        "answer": result.get("text") or "",
        "finish_reason": result.get("finish_reason") or "",
        "input_tokens": usage.get("input_tokens", ""),
        "output_tokens": usage.get("output_tokens", ""),
        "source": (result.get("source") or {}).get("kind", ""),
        "error": json.dumps(result["error"], ensure_ascii=False) if result.get("error") else "",
        "verdict": score.get("verdict", ""),
        "score": _blank(score.get("score")),
        "reason": score.get("reason", ""),
        "scorers": json.dumps(score.get("scorers", []), ensure_ascii=False) if score else "",
        "votes": json.dumps(score.get("votes", []), ensure_ascii=False) if score else "",
        "judge_verdict": _blank(score.get("judge_verdict")),
        "judge_score": _blank(score.get("judge_score")),
        "judge_error": _blank(score.get("judge_error")),
        "needles_found": _blank(score.get("needles_found")),
        "cost_usd": "" if cost is None else round(cost, 8),
    }


def _blank(value: Any) -> Any:
    return "" if value is None else value


def excerpt(text: str, needle: str) -> dict[str, str] | None:
    """The context around the first place ``needle`` occurs in ``text``: before, the needle, after."""
    at = text.find(needle) if needle else -1
    if at < 0:
        return None
    start, end = max(0, at - EXCERPT_CHARACTERS), min(len(text), at + len(needle) + EXCERPT_CHARACTERS)
    return {
        "before": ("…" if start else "") + text[start:at],
        "needle": needle,
        "after": text[at + len(needle) : end] + ("…" if end < len(text) else ""),
    }


def browser_record(run: Run, label: str, item: Joined, cost: float | None, view: View) -> dict[str, Any]:
    """What the cell browser shows of one cell: its values of the family's axes (with where its needle was placed,
    for a family of depths), its question as recorded, expected answers and the family's details beside the
    answer and its grading."""
    cell, result, score = item.cell, item.result, item.score
    target = next((n for n in cell["needles"] if n["role"] == "target"), None)
    around = None
    if item.request is not None and target is not None:
        provider_name = cell["model_id"].split("/", 1)[0]
        around = excerpt(provider(provider_name).prompt_text(item.request), target["text"])
    graded: dict[str, Any] = dict(score or {})  # (the fields a score line always has, read leniently)
    scorers = [
        {"scorer": s["scorer"], "verdict": s["verdict"], "reason": s.get("reason", "")}
        for s in graded.get("scorers", [])
    ]
    votes = [
        {"judge": v["judge"], "vote": v.get("vote"), "reply": (v.get("reply") or "")[:ANSWER_CHARACTERS]}
        for v in graded.get("votes", [])
    ]
    axes = {a.key: axis_value(cell, a.key) for a in view.axes}
    details = [(d.label, field_value(cell, d.field)) for d in view.details]
    placed = {"depth_actual": cell["depth"]["actual"]} if view.depth else {}
    return {
        "id": cell["cell_id"],
        "model": label,
        "variant": cell["prompt"],
        "length": cell["context_length"]["target"],
        "tokens_compiled": cell["context_length"]["prompt"],
        "axes": {key: views.text(value) for key, value in axes.items() if value is not None},
        **placed,
        "trial": cell["trial"],
        "negative": cell["negative"],
        "question": cell["question"],
        "expected": cell["expected"],
        "details": [
            {"label": name, "value": views.text(value)[:ANSWER_CHARACTERS]}
            for name, value in details
            if value is not None
        ],
        "answer": None if result is None else (result.get("text") or "")[:ANSWER_CHARACTERS],
        "status": None if result is None else result["status"],
        "error": None if result is None or not result.get("error") else json.dumps(result["error"])[:500],
        "verdict": graded.get("verdict"),
        "reason": graded.get("reason"),
        "scorers": scorers,
        "votes": votes,
        "input_tokens": None if result is None else result["usage"]["input_tokens"],
        "output_tokens": None if result is None else result["usage"]["output_tokens"],
        "cost": None if cost is None else round(cost, 6),
        "excerpt": around,
    }


class CellExport:
    """Writes, as cells pass: `cells.csv` (every recorded field, every cell) and the browser's per-model data files
    (`cells/<model>.json`, scored cells only); Parquet too when pyarrow is installed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        (folder / "cells").mkdir(parents=True, exist_ok=True)
        for stale in (folder / "cells").glob("*.json"):
            stale.unlink()
        self._csv_fh = open(folder / "cells.csv", "w", newline="", encoding="utf-8")  # noqa: SIM115 - close()
        self._csv = csv.DictWriter(self._csv_fh, fieldnames=CSV_FIELDS)
        self._csv.writeheader()
        self._parquet = ParquetSink(folder / "cells.parquet")
        self.files: dict[str, Path] = {}  # model label → its browser data file
        self._browser: dict[str, IO[str]] = {}
        self.counts: Counter[str] = Counter()

    def add(self, run: Run, run_label: str | None, label: str, item: Joined, cost: float | None, view: View) -> None:
        row = csv_row(run, run_label, item, cost)
        self._csv.writerow(row)
        self._parquet.add(row)
        if item.score is None:
            return
        fh = self._browser.get(label)
        if fh is None:
            path = self.folder / "cells" / f"{slug(label)}-{len(self.files) + 1}.json"
            self.files[label] = path
            fh = self._browser[label] = open(path, "w", encoding="utf-8")  # noqa: SIM115 - close()
            fh.write("[")
        fh.write(("," if self.counts[label] else "") + json.dumps(browser_record(run, label, item, cost, view)) + "\n")
        self.counts[label] += 1

    def close(self) -> None:
        self._csv_fh.close()
        self._parquet.close()
        for fh in self._browser.values():
            fh.write("]\n")
            fh.close()


# The column types of cells.parquet (every other column is text).
_INTEGERS = (
    "context_length",
    "context_length_actual",
    "prompt_tokens",
    "haystack_tokens",
    "o200k_tokens",
    "characters",
    "trial",
    "repeat",
    "max_tokens",
    "haystack_uses",
    "input_tokens",
    "output_tokens",
)
_FLOATS = ("depth", "depth_actual", "score", "judge_score", "needles_found", "cost_usd")
_BOOLEANS = ("tokens_exact", "negative", "judge_error")


class ParquetSink:
    """`cells.parquet`, the columns of cells.csv typed, written in row groups as rows come, when pyarrow is
    installed (nothing otherwise). Rows are buffered as columns, a row group at a time, and the pool's freed pages
    are handed back after each: memory stays that of one group however many cells pass."""

    GROUP = 4096

    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: dict[str, list[Any]] = {name: [] for name in CSV_FIELDS}
        self.writer: Any = None
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            self.enabled = False
            path.unlink(missing_ok=True)  # not one left from an earlier build with other rows
        else:
            self.enabled = True

    def add(self, row: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        for name, column in self.columns.items():
            value = row[name]
            column.append(None if value == "" else value if name in _TYPED else str(value))
        if len(self.columns["cell_id"]) >= self.GROUP:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema([(name, _arrow_type(pa, name)) for name in CSV_FIELDS])
        table = pa.table(self.columns, schema=schema)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, schema)
        self.writer.write_table(table)
        del table
        for column in self.columns.values():
            column.clear()
        pa.default_memory_pool().release_unused()

    def close(self) -> None:
        if not self.enabled:
            return
        if self.columns["cell_id"] or self.writer is None:
            self._flush()
        self.writer.close()


_TYPED = frozenset((*_INTEGERS, *_FLOATS, *_BOOLEANS))


def _arrow_type(pa: Any, name: str) -> Any:
    if name in _INTEGERS:
        return pa.int64()
    if name in _FLOATS:
        return pa.float64()
    return pa.bool_() if name in _BOOLEANS else pa.string()


def slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-").lower()[:60] or "model"


SUMMARY_FIELDS = (
    "model",
    "context_length",
    "depth",
    "axes",
    "n",
    "passes",
    "rate",
    "ci_low",
    "ci_high",
    "needles_found",
    "score",
)


def write_summary(data: ReportData, path: Path) -> None:
    """summary.csv: one row per model x length x depth, then one per model x length x point of the task's axes
    (JSON; with the mean `score`); `needles_found` is the mean share of target needles the answers give, for cells
    with several (RULER's partial credit), empty otherwise."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=SUMMARY_FIELDS)
        writer.writeheader()
        for label, rows in data.heat.items():
            for row in rows:
                values = {k: round(row[k], 4) if k == "rate" else row.get(k, "") for k in SUMMARY_FIELDS[1:]}
                writer.writerow({"model": label, **values, "axes": ""})
        for row in data.scores:
            values = {k: round(row[k], 4) if k == "rate" else row.get(k, "") for k in SUMMARY_FIELDS[1:]}
            writer.writerow({**values, "model": row["model"], "axes": json.dumps(row["axes"], sort_keys=True)})


def pass_rate(rows: list[dict[str, Any]]) -> tuple[int, int, float, float]:
    """Passes, n and the Wilson interval over rate rows."""
    passes, n = sum(r["passes"] for r in rows), sum(r["n"] for r in rows)
    low, high = wilson(passes, n)
    return passes, n, low, high
