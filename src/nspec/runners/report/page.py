"""The report page: a document of nspec's own (page.html.j2, page.css, page.js beside this module) with a header,
a summary table, each chart drawn by Vega in its own place, and the cell browser. Self-contained: Vega is inlined
and so is the browser's data when it is small (bigger runs keep it in report/cells/, which `nspec view` serves).

Every string from a spec or a run lands escaped for its context: HTML text by Jinja2's autoescape, and the data the
scripts read as JSON with every "<" written as \\u003c, so nothing in it can end the script element.
"""

from __future__ import annotations

import functools
import json
import os
from datetime import UTC, datetime
from importlib import metadata, resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nspec.run_layout import cache_dir
from nspec.runners.report import headline, notation
from nspec.runners.report.charts import PALETTE
from nspec.runners.report.data import LEFT_BY_SCORERS, Comparison, ReportData, Tally, run_labels
from nspec.runners.report.stats import effective_length, model_summary
from nspec.runners.run_store import Run
from nspec.version import __version__

if TYPE_CHECKING:
    from jinja2 import Template

EMBED_BYTES = 8 << 20  # browser data up to this size is inlined (file:// works); beyond, it stays in report/cells/
SHOWN = 100  # cells listed at once in the browser


def _asset(name: str) -> str:
    return resources.files("nspec.runners.report").joinpath(name).read_text(encoding="utf-8")


@functools.cache
def vega_bundle() -> str:
    """Vega, Vega-Lite and vega-embed in one script (from vl-convert, no network). vl-convert bundles it anew on each
    call, which takes its JavaScript engine some 130 MB — more than the rest of a report of 100,000 cells — so the
    script is kept in the user's cache folder, per vl-convert version; where that folder cannot be written, it is
    bundled each time."""
    import vl_convert as vlc

    cached = cache_dir() / f"vega-bundle-{metadata.version('vl-convert-python')}.js"
    try:
        return _raw_script(cached.read_text("utf-8"))
    except (OSError, UnicodeDecodeError):
        pass
    code = _raw_script(vlc.javascript_bundle())  # type: ignore[call-arg]
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        part = cached.with_name(f"{cached.name}.{os.getpid()}.part")
        part.write_text(code, "utf-8")
        part.replace(cached)  # whole or not at all, for a second process reading it
    except OSError:
        pass
    return code


def _raw_script(code: str) -> str:
    """Code that can sit inside a <script> element as it is."""
    lowered = code.lower()
    if "</script" in lowered or "<!--" in lowered:
        raise ValueError("a script for the report holds </script or <!--")
    return code


def script_json(value: Any) -> str:
    """JSON for a <script type="application/json"> element: every "<" as \\u003c, so no text ends the element."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def _time(path: Path) -> str:
    if not path.exists():
        return "not yet"
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _run_header(run: Run, label: str | None) -> dict[str, Any]:
    git = (run.manifest.get("provenance") or {}).get("git") or {}
    return {
        "name": run.spec["name"],
        "label": label,
        "run_id": run.run_id,
        "commit": (git.get("commit") or "")[:12] or None,
        "dirty": bool(git.get("dirty")),
        "compiled": _time(run.paths.manifest),
        "finished": _time(run.paths.scores),
        "version": run.manifest.get("nspec_version", "?"),
        "tokenizers": [
            {
                "model": m["label"],
                "name": m["tokenizer"]["name"],
                "exact": m["tokenizer"]["exact"],
                "margin": f"{m['tokenizer'].get('margin', 0):.0%}",
            }
            for m in run.manifest["models"]
        ],
    }


def _percent(value: float) -> str:
    return f"{value:.1%}"


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"


def _effective(rows: list[dict[str, Any]], threshold: float) -> dict[str, str]:
    """A model's effective length by pass rate (`stats.effective_length`) and its 95% bounds, written."""
    found = effective_length(rows, threshold)
    lengths = [r["context_length"] for r in rows]
    return {key: notation.effective(value, lengths) for key, value in found.items()}


def summary_rows(data: ReportData, threshold: float) -> list[dict[str, str]]:
    """One row per model: the numbers a paper quotes."""
    rows = []
    for i, label in enumerate(data.models):
        tally = data.tallies.get(label, Tally())
        row = {"model": label, "color": PALETTE[i % len(PALETTE)], "cells": f"{tally.cells:,}"}
        row["rate"] = row["effective"] = row["perfect"] = "—"
        score = data.model_scores.get(label)
        row["score"] = "—" if score is None else _percent(score) if data.metric.percent else f"{score:.3g}"
        lengths = [r for r in data.lengths if r["model"] == label]
        if lengths:
            s = model_summary(lengths)
            row["rate"] = f"{_percent(s['rate'])} of {s['n']:,} ({_percent(s['ci_low'])}-{_percent(s['ci_high'])})"
            eff = _effective(lengths, threshold)
            row["effective"] = f"{eff['length']} ({eff['low']} to {eff['high']})"
        heat = data.heat.get(label, [])
        if heat:
            longest = model_summary(heat)["all_depths_pass_up_to"]
            row["perfect"] = notation.length(longest) if longest else "no length"
        controls = sum(r["n"] for r in data.negatives if r["model"] == label)
        wrong = sum(tally.negative_reasons.values())
        row["negatives"] = f"{wrong} of {controls} ({wrong / controls:.0%})" if controls else "—"
        row["dissent"] = f"{tally.split / tally.judged:.0%} of {tally.judged:,} judged" if tally.judged else "—"
        row["cost"] = f"{_usd(tally.estimate)} / {_usd(tally.cost)}"
        left = [(tally.judge_errors, "judge error"), (tally.undecided, "undecided"), (tally.errors, "no answer")]
        row["left_out"] = ", ".join(f"{k} {what}" for k, what in left if k) or "0"
        rows.append(row)
    return rows


def grading_rows(data: ReportData) -> list[dict[str, str]]:
    """Per model: how many of its graded cells the scorers decided, the share each rule decided, and the share they
    left to the judges (or undecided, without judges)."""
    rows = []
    for label in data.models:
        rules = data.tallies.get(label, Tally()).rules
        total = sum(rules.values())
        if not total:
            continue
        left = rules.get(LEFT_BY_SCORERS, 0)
        by_rule = [f"{key}: {n / total:.1%}" for key, n in rules.most_common() if key != LEFT_BY_SCORERS]
        decided = total - left
        rows.append(
            {
                "model": label,
                "decided": f"{decided:,} of {total:,} ({decided / total:.1%})",
                "rules": "; ".join(by_rule) or "—",
                "left": f"{left:,} ({left / total:.1%})",
            }
        )
    return rows


def score_tables(data: ReportData, threshold: float) -> list[dict[str, Any]]:
    """Per model and axis of the task's cells (a task name, a swept parameter; "all" for cells with none): a row per
    value of the axis and a column per length, each the run's metric over its cells (over the other axes), x 100
    for a percentage; each row's average and its pass rate; each length's average over the rows (every value weighs
    the same, as RULER averages its tasks); and the effective length as RULER reads it (`headline.longest_at`): the
    longest length whose average is at or above the threshold."""
    times, bar = headline.scale(data), headline.scale(data) * threshold
    tables = []
    for label in data.models:
        rows = [r for r in data.values if r["model"] == label]
        lengths = sorted({r["context_length"] for r in rows})
        for axis in dict.fromkeys(r["axis"] for r in rows):
            means: dict[str, dict[int, float]] = {}
            passed: dict[str, list[int]] = {}
            for r in rows:
                if r["axis"] == axis:
                    if r["score"] is not None:
                        means.setdefault(r["value"], {})[r["context_length"]] = times * r["score"]
                    counts = passed.setdefault(r["value"], [0, 0])
                    counts[0] += r["passes"]
                    counts[1] += r["n"]
            averages = {n: _mean([m[n] for m in means.values() if n in m]) for n in lengths}
            scored = {n: a for n, a in averages.items() if a is not None}
            tables.append(
                {
                    "model": label,
                    "axis": axis,
                    "label": data.view.label(axis) if axis is not None else "",
                    "lengths": [notation.length(n) for n in lengths],
                    "rows": [
                        {
                            "value": value,
                            "scores": [_written(data, m.get(n)) for n in lengths],
                            "average": _written(data, _mean(list(m.values()))),
                            "pass_rate": f"{p / k:.0%}" if k else "—",
                        }
                        for value, m in means.items()
                        for p, k in [passed[value]]
                    ],
                    "averages": [_written(data, averages[n]) for n in lengths],
                    "average": _written(data, _mean(list(scored.values()))),
                    "effective": notation.effective(headline.longest_at(scored, bar), lengths),
                }
            )
    return tables


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _written(data: ReportData, value: float | None) -> str:
    """A table's number: to one decimal (a percentage's), or three figures."""
    return "—" if value is None else f"{value:.1f}" if data.metric.percent else f"{value:.3g}"


def headline_table(data: ReportData, threshold: float) -> dict[str, Any] | None:
    """The family's headline table, as the page shows it (its files have the same: `headline.summary`)."""
    table = data.view.table
    scores = headline.scores_of(data, table.axis) if table is not None else {}
    if table is None or not scores:
        return None
    lengths, rows = headline.rows(scores, headline.scale(data) * threshold)
    return {"title": table.title, "lengths": [notation.length(n) for n in lengths], "rows": rows}


def summary_words(data: ReportData, threshold: float) -> list[dict[str, str]]:
    """The summary per model in sentences, as a reader would quote it."""
    lines = []
    for label in data.models:
        lengths = [r for r in data.lengths if r["model"] == label]
        heat = data.heat.get(label, [])
        tally = data.tallies.get(label, Tally())
        parts = []
        if lengths:
            s = model_summary(lengths)
            rate = f"{s['rate']:.1%} of {s['n']} cells pass (95% CI {s['ci_low']:.1%}-{s['ci_high']:.1%})"
            if heat:
                longest = model_summary(heat)["all_depths_pass_up_to"]
                rate += "; " + (
                    f"every depth passes up to {notation.length(longest)} tokens"
                    if longest
                    else "at no length does every depth pass"
                )
            parts.append(rate)
            eff = _effective(lengths, threshold)
            parts.append(
                f"effective length {eff['length']} tokens at a pass rate of {threshold:.1%} "
                f"(95%: {eff['low']} to {eff['high']})"
            )
        if tally.needles_found.n:
            parts.append(f"{tally.needles_found.result():.1%} of needles found on average")
        if tally.judge_scores.n:
            parts.append(f"mean judge score {tally.judge_scores.result():.1f} of 10")
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
        lines.append({"model": label, "text": "; ".join(parts)})
    return lines


def _comparison_rows(comparisons: list[Comparison]) -> list[dict[str, Any]]:
    rows = []
    for c in comparisons:
        first = c.first_passes / c.shared if c.shared else 0.0
        second = c.second_passes / c.shared if c.shared else 0.0
        significant = c.p_value < 0.05
        rows.append(
            {
                "model": c.model,
                "first": c.first,
                "second": c.second,
                "shared": f"{c.shared:,}",
                "first_rate": _percent(first),
                "second_rate": _percent(second),
                "change": f"{(second - first) * 100:+.1f} points",
                "only_first": c.only_first,
                "only_second": c.only_second,
                "p": f"{c.p_value:.3g}",
                "reading": "a change beyond noise (p < 0.05)" if significant else "within noise",
                "flipped": [{**f, "length": notation.length(f["context_length"])} for f in c.flipped[:200]],
            }
        )
    return rows


def _cache_arm_rows(arms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def rate(row: dict[str, Any]) -> str:
        if not row["n"]:
            return "no cells"
        return f"{_percent(row['rate'])} of {row['n']:,} ({_percent(row['ci_low'])}-{_percent(row['ci_high'])})"

    return [
        {
            "model": a["model"],
            "cached": rate(a["cached"]),
            "control": rate(a["control"]),
            "p": f"{a['p_value']:.3g}" if a["control"]["n"] and a["cached"]["n"] else "-",
            "reading": (
                "no control arm to compare"
                if not a["control"]["n"]
                else "a difference beyond noise (p < 0.05)"
                if a["p_value"] < 0.05
                else "within noise"
            ),
        }
        for a in arms
    ]


def _notes(runs: list[Run]) -> list[str]:
    """What each compile did in place of what its spec asked (from the manifest)."""
    labels = run_labels(runs) if len(runs) > 1 else [""]
    return [
        (f"{label}: " if label else "") + note["message"]
        for run, label in zip(runs, labels, strict=True)
        for note in run.manifest.get("fallbacks", [])
    ]


@functools.cache
def _page_template() -> Template:
    """The page's template, compiled once a process (compiling it takes longer than rendering it)."""
    from jinja2 import Environment, select_autoescape

    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    return env.from_string(_asset("page.html.j2"))


def render_page(
    runs: list[Run],
    data: ReportData,
    drawn: list[tuple[str, str, dict[str, Any]]],
    browser: list[dict[str, Any]],
    folder: Path,
) -> str:
    """The page's HTML. ``drawn`` are the charts (name, model, Vega-Lite spec); ``browser`` the cell data per model,
    each with the file it is in; inlined when all of it is small enough."""
    from markupsafe import Markup

    options = runs[0].spec.get("report", {})
    title = options.get("title", " vs ".join(r.spec["name"] for r in runs))
    threshold = float(options.get("effective_length_threshold", 0.856))
    size = sum(os.path.getsize(m["path"]) for m in browser)
    models = []
    for m in browser:
        cells = json.loads(Path(m["path"]).read_text("utf-8")) if size <= EMBED_BYTES else None
        models.append({"label": m["label"], "count": m["count"], "file": m["file"], "cells": cells})
    kinds = {name: name.split("-", 1)[0] for name, _, _ in drawn}
    axes = [{"key": a.key, "label": a.label} for a in data.view.axes]
    payload = {
        "charts": [{"name": n, "kind": kinds[n], "model": model, "spec": spec} for n, model, spec in drawn],
        "models": models,
        "axes": axes,  # what the browser's cells are told apart by, beside model and length
        "shown": SHOWN,
    }
    variants = sorted({p["name"] for r in runs for p in r.spec.get("prompts", [])})
    lengths = sorted({r["context_length"] for r in (*data.lengths, *data.negatives)})
    label = data.metric.label
    template = _page_template()
    names = run_labels(runs) if len(runs) > 1 else [None]
    return template.render(
        title=title,
        description=runs[0].spec.get("description"),
        version=__version__,
        runs=[_run_header(r, n) for r, n in zip(runs, names, strict=True)],
        summary=summary_rows(data, threshold),
        grading=grading_rows(data),
        depth=data.view.depth,
        metric={"label": label, "heading": label[:1].upper() + label[1:], "percent": data.metric.percent},
        headline=headline_table(data, threshold),
        score_tables=score_tables(data, threshold),
        threshold_score=_written(data, headline.scale(data) * threshold),
        words=summary_words(data, threshold),
        threshold=f"{threshold:.1%}",
        notes=_notes(runs),
        comparisons=_comparison_rows(data.comparisons),
        cache_arms=_cache_arm_rows(data.cache_arms),
        charts=[{"name": n} for n, _, _ in drawn],
        browser_models=[m["label"] for m in models],
        lengths=[{"value": str(n), "text": notation.length(n)} for n in lengths],
        axes=[{**a, "values": data.axis_values.get(a["key"], [])} for a in axes],
        variants=variants,
        css=Markup(_raw_script(_asset("page.css"))),
        data_json=Markup(script_json(payload)),
        vega=Markup(vega_bundle()),
        script=Markup(_raw_script(_asset("page.js"))),
    )
