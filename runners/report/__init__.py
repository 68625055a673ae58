"""The report: charts a reader understands without the docs, an offline `index.html`, one PNG per chart and
`summary.csv`.

Charts (Altair; each drawn only when it has data, or as the spec's `report.charts` selects): per model the depth x
length heatmap of pass rates in needlehaystack's red-yellow-green with rate and n in each cell, beside every answer
as a point whose tooltip shows its length, depth, trial, answer, verdict and votes; pass rate against length with
Wilson 95% intervals, a line per model (and per run when several runs are compared); NIAN's pass rate by location per
repeat count; the negative controls' false-positive rate; judge dissent; tokens and cost per model, estimated against
actual. `index.html` inlines the Vega libraries (it works from file:// with no network); Vega's tooltips show answers
as text, never as HTML.
"""

from __future__ import annotations

import csv
import html
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nspec.compiler.prices import price_for
from nspec.records import CellRecord
from nspec.runners.grading.audit import dissent
from nspec.runners.rundir import Run

RAMP = ["#F0496E", "#EBB839", "#0CD79F"]
Z95 = 1.959963984540054
CELL_POINTS = 5000  # per model: more answers than this are not plotted one by one (the heatmap still counts all)
CHARTS = ("heatmap", "length", "location", "negatives", "dissent", "cost")


def wilson(passes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a pass rate: honest at 0 and 1 and for small n, unlike p ± z·se."""
    if n == 0:
        return 0.0, 1.0
    p = passes / n
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, center - half), min(1.0, center + half)


def _rate_row(passes: int, n: int, **keys: Any) -> dict[str, Any]:
    low, high = wilson(passes, n)
    return {
        **keys,
        "n": n,
        "passes": passes,
        "rate": passes / n if n else 0.0,
        "ci_low": round(low, 4),
        "ci_high": round(high, 4),
    }


# Why a negative control (no needle) was answered wrongly, from its verdict's reason.
NEGATIVE_REASONS = {
    "invents a value": "invented a value",
    "does not say the answer is missing": "did not say not found",
}


@dataclass
class Tally:
    """What a model's cells add up to beyond pass and fail."""

    undecided: int = 0  # no scorer decided and no judge was asked
    judge_errors: int = 0  # too few judges gave a verdict
    errors: int = 0  # the request got no answer
    needles_found: list[float] = field(default_factory=list)  # multi-needle cells: the share found
    judge_scores: list[float] = field(default_factory=list)  # score-10 judges: each cell's mean score
    negative_reasons: Counter[str] = field(default_factory=Counter)


@dataclass
class ReportData:
    heat: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    points: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    lengths: list[dict[str, Any]] = field(default_factory=list)
    locations: list[dict[str, Any]] = field(default_factory=list)
    negatives: list[dict[str, Any]] = field(default_factory=list)  # false-positive rate per model and length
    negative_reasons: list[dict[str, Any]] = field(default_factory=list)  # the same, split by reason
    dissent: list[dict[str, Any]] = field(default_factory=list)
    costs: list[dict[str, Any]] = field(default_factory=list)
    tallies: dict[str, Tally] = field(default_factory=dict)


def run_labels(runs: list[Run]) -> list[str]:
    """How each run is named beside its models when several are compared (the same run twice stays two)."""
    base = [f"{r.spec['name']}/{r.run_id[:6]}" for r in runs]
    return [f"{b}#{i + 1}" if base.count(b) > 1 else b for i, b in enumerate(base)]


def _label(cell: CellRecord, run_label: str | None) -> str:
    label = cell["model"] + (f" ({cell['prompt']})" if cell["prompt"] else "")
    return f"{label} · {run_label}" if run_label else label


def collect(runs: list[Run]) -> ReportData:
    data = ReportData()
    names: list[str | None] = list(run_labels(runs)) if len(runs) > 1 else [None]
    heat: dict[tuple[str, int, float], list[int]] = defaultdict(lambda: [0, 0])
    by_length: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    by_location: dict[tuple[str, float, int], list[int]] = defaultdict(lambda: [0, 0])
    negatives: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    reasons: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
    found: dict[tuple[str, int, float], list[float]] = defaultdict(list)
    for run, run_label in zip(runs, names, strict=True):
        cells = {c["cell_id"]: c for c in run.cells()}
        answers = _answers(run)
        for score in run.scores():
            cell = cells[score["cell_id"]]
            label = _label(cell, run_label)
            tally = data.tallies.setdefault(label, Tally())
            if "judge_score" in score:
                tally.judge_scores.append(score["judge_score"])
            if score["verdict"] not in ("pass", "fail"):
                if score["verdict"] == "error":
                    tally.errors += 1
                elif score.get("judge_error"):
                    tally.judge_errors += 1
                else:
                    tally.undecided += 1
                continue
            passed = score["verdict"] == "pass"
            length = cell["context_length"]["target"]
            if cell["negative"]:
                counts = negatives[(label, length)]
                counts[0] += not passed  # a false positive: the model answered what is not there
                counts[1] += 1
                if not passed:
                    why = NEGATIVE_REASONS.get(score["reason"], "judged wrong")
                    reasons[(label, length)][why] += 1
                    tally.negative_reasons[why] += 1
                continue
            depth = cell["depth"]["requested"]
            assert depth is not None  # every cell with a needle was placed at a grid depth
            for counts in (heat[(label, length, depth)], by_length[(label, length)]):
                counts[0] += passed
                counts[1] += 1
            if "needles_found" in score:
                found[(label, length, depth)].append(score["needles_found"])
                tally.needles_found.append(score["needles_found"])
            if cell["repeat"] is not None:
                counts = by_location[(label, depth, cell["repeat"])]
                counts[0] += passed
                counts[1] += 1
            points = data.points.setdefault(label, [])
            if len(points) < CELL_POINTS:
                points.append(
                    {
                        "context_length": length,
                        "depth": depth,
                        "trial": cell["trial"],
                        "verdict": score["verdict"],
                        "answer": answers.get(score["cell_id"], "")[:300],
                        "votes": ", ".join(f"{v['judge']}: {v['vote']}" for v in score.get("votes", [])),
                    }
                )
        data.dissent += [{**row, "run": run.spec["name"]} for row in dissent(run)]
        data.costs += _costs(run, run_label)
    for (label, length, depth), (passes, n) in sorted(heat.items()):
        row = _rate_row(passes, n, context_length=length, depth=depth)
        row["text"] = f"{row['rate']:.2f} (n={n})"
        shares = found.get((label, length, depth))
        if shares:
            row["needles_found"] = round(sum(shares) / len(shares), 4)
        data.heat.setdefault(label, []).append(row)
    data.lengths = [
        _rate_row(p, n, model=label, context_length=length) for (label, length), (p, n) in sorted(by_length.items())
    ]
    data.locations = [
        _rate_row(p, n, model=label, location=loc, repeat=str(rep))
        for (label, loc, rep), (p, n) in sorted(by_location.items())
    ]
    data.negatives = [
        _rate_row(fp, n, model=label, context_length=length) for (label, length), (fp, n) in sorted(negatives.items())
    ]
    data.negative_reasons = [
        {"model": label, "context_length": length, "reason": why, "count": k, "rate": k / negatives[key][1]}
        for key in sorted(reasons)
        for label, length in [key]
        for why, k in sorted(reasons[key].items())
    ]
    return data


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


def _answers(run: Run) -> dict[str, str]:
    return {r["cell_id"]: r.get("text") or "" for r in run.results()}


def _costs(run: Run, run_label: str | None) -> list[dict[str, Any]]:
    """Per model: the plan's estimate (live and batch) against the cost of what was actually used."""
    suffix = f" · {run_label}" if run_label else ""
    entries = {m.get("name", m["id"]): m for m in run.spec["models"]}
    used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # live in/out, batch in/out
    for r in run.results():
        offset = 2 if r["source"]["kind"] == "batch" else 0
        used[r["model"]][offset] += r["usage"]["input_tokens"]
        used[r["model"]][offset + 1] += r["usage"]["output_tokens"]
    rows = []
    for model in run.manifest["models"]:
        label = model["label"] + suffix
        price = price_for(model["id"], entries[model["label"]].get("price"))
        li, lo, bi, bo = used[model["label"]]
        actual = None if price is None else price.cost(li, lo, batch=False) + price.cost(bi, bo, batch=True)
        for kind, usd, tokens in (
            ("estimate, live", model["cost_usd"]["live"], model["input_tokens"]),
            ("estimate, batch", model["cost_usd"]["batch"], model["input_tokens"]),
            ("actual", actual, li + bi),
        ):
            if usd is not None:
                rows.append({"model": label, "kind": kind, "usd": round(usd, 4), "input_tokens": tokens})
    return rows


# -- charts ---------------------------------------------------------------------------------------------------------


def heatmap(label: str, rows: list[dict[str, Any]], points: list[dict[str, Any]]) -> Any:
    import altair as alt

    base = alt.Chart(alt.InlineData(values=rows), title=f"{label}: pass rate by depth and context length")
    x = alt.X("context_length:O", title="Context length (tokens)")
    y = alt.Y("depth:O", title="Depth (%)", sort="ascending")
    rect = base.mark_rect().encode(
        x=x,
        y=y,
        color=alt.Color("rate:Q", title="Pass rate", scale=alt.Scale(domain=[0, 0.5, 1], range=RAMP)),
        tooltip=[
            "context_length:O",
            "depth:O",
            alt.Tooltip("rate:Q", format=".0%"),
            "passes:Q",
            "n:Q",
            alt.Tooltip("ci_low:Q", format=".0%", title="95% CI low"),
            alt.Tooltip("ci_high:Q", format=".0%", title="95% CI high"),
        ],
    )
    text = base.mark_text(fontSize=9).encode(x=x, y=y, text="text:N")
    grid = (rect + text).properties(width=alt.Step(64), height=alt.Step(22))
    cells = (
        alt.Chart(alt.InlineData(values=points), title="every answer")
        .mark_point(filled=True, size=30)
        .encode(
            x=x,
            y=y,
            xOffset="trial:N",
            color=alt.Color("verdict:N", scale=alt.Scale(domain=["pass", "fail"], range=[RAMP[2], RAMP[0]])),
            tooltip=["context_length:O", "depth:O", "trial:N", "verdict:N", "answer:N", "votes:N"],
        )
        .properties(width=alt.Step(64), height=alt.Step(22))
    )
    return alt.hconcat(grid, cells)


def length_chart(rows: list[dict[str, Any]]) -> Any:
    import altair as alt

    base = alt.Chart(alt.InlineData(values=rows), title="Pass rate by context length (95% Wilson intervals)")
    x = alt.X("context_length:Q", title="Context length (tokens)", scale=alt.Scale(type="log", nice=False))
    line = base.mark_line(point=True).encode(
        x=x,
        y=alt.Y("rate:Q", title="Pass rate", scale=alt.Scale(domain=[0, 1])),
        color="model:N",
        tooltip=["model:N", "context_length:Q", alt.Tooltip("rate:Q", format=".0%"), "passes:Q", "n:Q"],
    )
    band = base.mark_area(opacity=0.15).encode(x=x, y="ci_low:Q", y2="ci_high:Q", color="model:N")
    return (band + line).properties(width=520, height=260)


def location_chart(rows: list[dict[str, Any]]) -> Any:
    import altair as alt

    return (
        alt.Chart(alt.InlineData(values=rows), title="Pass rate by location of the item, per repeat count")
        .mark_line(point=True)
        .encode(
            x=alt.X("location:Q", title="Location (% of the stack)"),
            y=alt.Y("rate:Q", title="Pass rate", scale=alt.Scale(domain=[0, 1])),
            color="model:N",
            strokeDash=alt.StrokeDash("repeat:N", title="Repeats"),
            tooltip=["model:N", "location:Q", "repeat:N", alt.Tooltip("rate:Q", format=".0%"), "n:Q"],
        )
        .properties(width=520, height=260)
    )


def negatives_chart(rows: list[dict[str, Any]], reasons: list[dict[str, Any]]) -> Any:
    """Per model, the share of negative controls answered wrongly at each length, split by why (a value invented,
    no "not found" said, or the judges' verdict), with the Wilson interval and the count over the bars."""
    import altair as alt

    values = [{**r, "kind": "reason"} for r in reasons] + [{**r, "kind": "total"} for r in rows]
    base = alt.Chart(alt.InlineData(values=values))
    x = alt.X("context_length:O", title="Context length (tokens)")
    why = [*NEGATIVE_REASONS.values(), "judged wrong"]
    bars = (
        base.transform_filter("datum.kind == 'reason'")
        .mark_bar()
        .encode(
            x=x,
            y=alt.Y("rate:Q", title="Share answered wrongly", scale=alt.Scale(domain=[0, 1]), stack="zero"),
            color=alt.Color("reason:N", title="Why", scale=alt.Scale(domain=why, range=[RAMP[0], "#8c6bb1", "#777"])),
            tooltip=["model:N", "context_length:O", "reason:N", "count:Q"],
        )
    )
    totals = base.transform_filter("datum.kind == 'total'")
    errors = totals.mark_rule().encode(x=x, y="ci_low:Q", y2="ci_high:Q")
    counts = (
        totals.transform_calculate(label="datum.passes + '/' + datum.n")
        .mark_text(dy=-6, fontSize=9)
        .encode(x=x, y="ci_high:Q", text="label:N")
    )  # above the interval; "0/16" reads where no bar shows
    return (
        alt.layer(bars, errors, counts)
        .properties(width=alt.Step(48), height=200)
        .facet(column=alt.Column("model:N", title=None))
        .properties(title="Negative controls: share answered wrongly (no needle), and why")
    )


def dissent_chart(rows: list[dict[str, Any]]) -> Any:
    import altair as alt

    values = [r for r in rows if r["dissent_from_majority"] is not None]
    return (
        alt.Chart(alt.InlineData(values=values), title="Judge dissent: votes against the panel's majority")
        .mark_bar()
        .encode(
            x=alt.X("dissent_from_majority:Q", title="Share of votes", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("judge:N", title=None),
            tooltip=["judge:N", "votes:Q", "dissent_from_majority:Q"],
        )
        .properties(width=420)
    )


def cost_chart(rows: list[dict[str, Any]]) -> Any:
    import altair as alt

    return (
        alt.Chart(alt.InlineData(values=rows), title="Cost per model (USD): estimate against actual")
        .mark_bar()
        .encode(
            x=alt.X("usd:Q", title="USD"),
            y=alt.Y("model:N", title=None),
            yOffset="kind:N",
            color="kind:N",
            tooltip=["model:N", "kind:N", alt.Tooltip("usd:Q", format="$.4f"), "input_tokens:Q"],
        )
        .properties(width=420)
    )


def charts(data: ReportData, wanted: tuple[str, ...]) -> list[tuple[str, Any]]:
    """(file name, chart) for every wanted chart that has data."""
    out: list[tuple[str, Any]] = []
    if "heatmap" in wanted:
        for label, rows in data.heat.items():
            out.append((f"heatmap-{_slug(label)}", heatmap(label, rows, data.points.get(label, []))))
    for name, rows, draw in (
        ("length", data.lengths, length_chart),
        ("location", data.locations, location_chart),
        ("negatives", data.negatives, lambda rows: negatives_chart(rows, data.negative_reasons)),
        ("dissent", [r for r in data.dissent if r["votes"]], dissent_chart),
        ("cost", data.costs, cost_chart),
    ):
        if name in wanted and rows:
            out.append((name, draw(rows)))
    return out


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-").lower()[:60]


# -- output ---------------------------------------------------------------------------------------------------------

SUMMARY_FIELDS = ("model", "context_length", "depth", "n", "passes", "rate", "ci_low", "ci_high", "needles_found")


def write_summary(data: ReportData, path: Path) -> None:
    """summary.csv: one row per model x length x depth; `needles_found` is the mean share of target needles the
    answers give, for cells with several (RULER's partial credit), empty otherwise."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=SUMMARY_FIELDS)
        writer.writeheader()
        for label, rows in data.heat.items():
            for row in rows:
                values = {k: round(row[k], 4) if k == "rate" else row.get(k, "") for k in SUMMARY_FIELDS[1:]}
                writer.writerow({"model": label, **values})


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


def _tokens(length: int | None, shortest: int) -> str:
    return f"{length:,}" if length is not None else f"below {shortest:,}"


def _summary_html(data: ReportData, threshold: float) -> str:
    items = []
    for label in sorted(set(data.heat) | set(data.tallies)):
        rows = data.heat.get(label, [])
        tally = data.tallies.get(label, Tally())
        parts = []
        if rows:
            s = model_summary(rows)
            longest = f"{s['all_depths_pass_up_to']:,} tokens" if s["all_depths_pass_up_to"] else "no length"
            parts.append(
                f"{s['rate']:.1%} of {s['n']} cells pass (95% CI {s['ci_low']:.1%}-{s['ci_high']:.1%}); "
                f"every depth passes up to {longest}"
            )
            lengths = [r for r in data.lengths if r["model"] == label]
            eff = effective_length(lengths, threshold)
            shortest = min(r["context_length"] for r in lengths)
            parts.append(
                f"effective length {_tokens(eff['length'], shortest)} tokens at a pass rate of {threshold:.1%} "
                f"(95%: {_tokens(eff['low'], shortest)} to {_tokens(eff['high'], shortest)})"
            )
        if tally.needles_found:
            parts.append(f"{sum(tally.needles_found) / len(tally.needles_found):.1%} of needles found on average")
        if tally.judge_scores:
            parts.append(f"mean judge score {sum(tally.judge_scores) / len(tally.judge_scores):.1f} of 10")
        wrong = sum(tally.negative_reasons.values())
        controls = sum(r["n"] for r in data.negatives if r["model"] == label)
        if controls:
            ranked = sorted(tally.negative_reasons.items(), key=lambda kv: (-kv[1], kv[0]))
            why = ", ".join(f"{k} {reason}" for reason, k in ranked)
            parts.append(f"negative controls: {wrong} of {controls} answered wrongly" + (f" ({why})" if why else ""))
        left = [
            (tally.judge_errors, "undecided (judge error)"),
            (tally.undecided, "undecided (no judge)"),
            (tally.errors, "without an answer (request failed)"),
        ]
        parts += [f"{k} cell{'s' * (k != 1)} {what}, in no pass rate" for k, what in left if k]
        items.append(f"<li><b>{html.escape(label)}</b>: " + html.escape("; ".join(parts)) + "</li>")
    return "<section><h2>Summary</h2><ul>" + "".join(items) + "</ul></section>"


def _script_safe(page: str, spec: dict[str, Any]) -> str:
    """vl-convert writes the chart spec, answers included, raw into a <script>: an answer holding "</script>"
    would end the script and run what follows. Put the same spec back with "</" and "<!--" escaped, which
    JavaScript reads as the same strings."""
    marker = "const spec = "
    start = page.index(marker) + len(marker)
    end = page.index(";\n", start)  # JSON holds no raw newline: the first one after it ends the statement
    safe = json.dumps(spec, ensure_ascii=False).replace("</", "<\\/").replace("<!--", "<\\!--")
    safe = safe.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return page[:start] + safe + page[end:]


def _fallbacks_html(runs: list[Run]) -> str:
    """What each compile did in place of what its spec asked (from the manifest): a repeated haystack, estimated
    token counts, needles far from their depth, unknown prices."""
    labels = run_labels(runs) if len(runs) > 1 else [""]
    items = [
        f"<li>{html.escape(f'{label}: ' if label else '')}{html.escape(note['message'])}</li>"
        for run, label in zip(runs, labels, strict=True)
        for note in run.manifest.get("fallbacks", [])
    ]
    return "<section><h2>Notes</h2><ul>" + "".join(items) + "</ul></section>" if items else ""


def _chart_files(folder: Path) -> list[str]:
    """The chart images in a report folder, by the names `charts` gives them."""
    fixed = {f"{name}.png" for name in CHARTS if name != "heatmap"}
    return [p.name for p in folder.glob("*.png") if p.name in fixed or p.name.startswith("heatmap-")]


def build_report(runs: list[Run], folder: Path | None = None) -> Path:
    """Write the report of one run (into its report/) or of several (into the first's, unless ``folder``)."""
    import altair as alt
    import vl_convert as vlc

    folder = folder or runs[0].path / "report"
    folder.mkdir(parents=True, exist_ok=True)
    data = collect(runs)
    options = runs[0].spec.get("report", {})
    wanted = tuple(options.get("charts", CHARTS))
    drawn = charts(data, wanted)
    for stale in set(_chart_files(folder)) - {f"{name}.png" for name, _ in drawn}:
        (folder / stale).unlink()  # a chart an earlier report drew and this one does not (a judge gone, say)
    for name, chart in drawn:
        (folder / f"{name}.png").write_bytes(vlc.vegalite_to_png(chart.to_dict(), scale=2))
    write_summary(data, folder / "summary.csv")
    title = options.get("title", " vs ".join(r.spec["name"] for r in runs))
    threshold = float(options.get("effective_length_threshold", 0.856))
    head = f"<h1>{html.escape(title)}</h1>\n{_summary_html(data, threshold)}{_fallbacks_html(runs)}"
    if drawn:
        spec = alt.vconcat(*(chart for _, chart in drawn)).configure_view(strokeWidth=0).to_dict()
        page = _script_safe(vlc.vegalite_to_html(spec, bundle=True), spec)
        page = page.replace("<head>", f"<head>\n    <title>{html.escape(title)}</title>", 1)
        body = page.index("<body>", page.index("</head>")) + len("<body>")  # not a "<body>" inside the libraries
        page = page[:body] + f"\n{head}" + page[body:]
    else:
        page = (
            f"<!DOCTYPE html><html><head><title>{html.escape(title)}</title></head><body>{head}"
            "<p>No scored cells yet.</p></body></html>"
        )
    (folder / "index.html").write_text(page, encoding="utf-8")
    return folder / "index.html"
