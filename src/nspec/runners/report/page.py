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
from collections import defaultdict
from datetime import UTC, datetime
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from nspec.run_layout import cache_dir
from nspec.runners.grading import ruler
from nspec.runners.report.charts import PALETTE
from nspec.runners.report.data import Comparison, ReportData, Tally, run_labels
from nspec.runners.report.stats import effective_length, model_summary
from nspec.runners.run_store import Run
from nspec.version import __version__

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


def _length(value: int | None, shortest: int) -> str:
    return f"{value:,}" if value is not None else f"below {shortest:,}"


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"


def summary_rows(data: ReportData, threshold: float) -> list[dict[str, str]]:
    """One row per model: the numbers a paper quotes."""
    rows = []
    for i, label in enumerate(data.models):
        heat = data.heat.get(label, [])
        tally = data.tallies.get(label, Tally())
        row = {"model": label, "color": PALETTE[i % len(PALETTE)], "cells": f"{tally.cells:,}"}
        row["rate"] = row["effective"] = row["perfect"] = "—"
        lengths = [r for r in data.lengths if r["model"] == label]
        if not heat and lengths:  # a task without depths: pass rates per length only
            s = model_summary(lengths)
            row["rate"] = f"{_percent(s['rate'])} of {s['n']:,} ({_percent(s['ci_low'])}-{_percent(s['ci_high'])})"
            eff = effective_length(lengths, threshold)
            shortest = min(r["context_length"] for r in lengths)
            row["effective"] = (
                f"{_length(eff['length'], shortest)} ({_length(eff['low'], shortest)}-{_length(eff['high'], shortest)})"
            )
        if heat:
            s = model_summary(heat)
            row["rate"] = f"{_percent(s['rate'])} of {s['n']:,} ({_percent(s['ci_low'])}-{_percent(s['ci_high'])})"
            lengths = [r for r in data.lengths if r["model"] == label]
            eff = effective_length(lengths, threshold)
            shortest = min(r["context_length"] for r in lengths)
            row["effective"] = (
                f"{_length(eff['length'], shortest)} ({_length(eff['low'], shortest)}-{_length(eff['high'], shortest)})"
            )
            row["perfect"] = f"{s['all_depths_pass_up_to']:,}" if s["all_depths_pass_up_to"] else "no length"
        controls = sum(r["n"] for r in data.negatives if r["model"] == label)
        wrong = sum(tally.negative_reasons.values())
        row["negatives"] = f"{wrong} of {controls} ({wrong / controls:.0%})" if controls else "—"
        row["dissent"] = f"{tally.split / tally.judged:.0%} of {tally.judged:,} judged" if tally.judged else "—"
        row["cost"] = f"{_usd(tally.estimate)} / {_usd(tally.cost)}"
        left = [(tally.judge_errors, "judge error"), (tally.undecided, "undecided"), (tally.errors, "no answer")]
        row["left_out"] = ", ".join(f"{k} {what}" for k, what in left if k) or "0"
        rows.append(row)
    return rows


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def score_tables(data: ReportData, threshold: float, metric: str | None = None) -> list[dict[str, Any]]:
    """RULER's table, per model and axis of the task (a task name, a swept parameter): a row per value of the axis
    and a column per length, each the mean score x 100 of its cells (over the other axes) under ``metric`` (the
    spec's first scorer: F1 for GraphWalks, a similarity ratio for MRCR); each row's average and its pass rate; each
    length's average over the rows (every value weighs the same, as RULER averages its tasks); and the effective
    length as RULER reads it (`grading.ruler.effective_length`): the longest length whose average is at or above the
    threshold, written `<4K` when none is and `>128K` when the longest is."""
    tables = []
    for label in data.models:
        rows = [r for r in data.scores if r["model"] == label]
        if not rows:
            continue
        lengths = sorted({r["context_length"] for r in rows})
        for axis in sorted({k for r in rows for k in r["axes"]}) or [None]:
            sums: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
            passed: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            for r in rows:
                value = "all" if axis is None else _value(r["axes"].get(axis))
                cell = sums[value][r["context_length"]]
                cell[0] += r["score"] * r["n"]
                cell[1] += r["n"]
                passed[value][0] += r["passes"]
                passed[value][1] += r["n"]
            means = {v: {n: 100 * t / k for n, (t, k) in by.items() if k} for v, by in sorted(sums.items())}
            averages = {
                n: sum(m[n] for m in means.values() if n in m) / sum(n in m for m in means.values()) for n in lengths
            }
            effective = ruler.effective_label(ruler.effective_length(averages, 100 * threshold), lengths)
            tables.append(
                {
                    "model": label,
                    "axis": axis,
                    "metric": metric or "score",
                    "lengths": [f"{n:,}" for n in lengths],
                    "rows": [
                        {
                            "value": value,
                            "scores": [f"{m[n]:.1f}" if n in m else "—" for n in lengths],
                            "average": f"{sum(m.values()) / len(m):.1f}",
                            "pass_rate": f"{passed[value][0] / passed[value][1]:.0%}" if passed[value][1] else "—",
                        }
                        for value, m in means.items()
                    ],
                    "averages": [f"{averages[n]:.1f}" for n in lengths],
                    "average": f"{sum(averages.values()) / len(averages):.1f}",
                    "effective": effective,
                }
            )
    return tables


def _metric(spec: dict[str, Any]) -> str | None:
    """The name of the spec's first scorer (what a score table's numbers are)."""
    scoring = spec.get("scoring") or []
    return next(iter(scoring[0]), None) if scoring and isinstance(scoring[0], dict) else None


def ruler_scores(data: ReportData) -> dict[str, dict[int, dict[str, float]]]:
    """RULER's task scores of a run whose cells have RULER's task as an axis: per model, length and task, the mean
    score x 100 of its graded cells (over any other axes). Empty for any other run."""
    sums: dict[str, dict[int, dict[str, list[float]]]] = {}
    for r in data.scores:
        task = r["axes"].get("task")
        if task in ruler.TASKS and r["n"]:
            by_task = sums.setdefault(r["model"], {}).setdefault(r["context_length"], {})
            total = by_task.setdefault(task, [0.0, 0.0])
            total[0] += r["score"] * r["n"]
            total[1] += r["n"]
    return {
        model: {n: {task: 100 * t / k for task, (t, k) in sorted(ts.items())} for n, ts in sorted(lengths.items())}
        for model, lengths in sums.items()
    }


def ruler_summary(data: ReportData, threshold: float) -> dict[str, Any] | None:
    """RULER's results, for report/ruler.json and ruler.md: per model the task scores per length, each length's
    average, and the effective length by RULER's rule (`runners.grading.ruler`); None for a run without RULER's
    tasks as an axis."""
    scores = ruler_scores(data)
    if not scores:
        return None
    models = {}
    for model, by_length in scores.items():
        averages = {n: ruler.length_score(tasks) for n, tasks in by_length.items()}
        effective = ruler.effective_length(averages, 100 * threshold)
        models[model] = {
            "effective_length": effective,
            "effective_label": ruler.effective_label(effective, sorted(averages)),
            "lengths": {
                str(n): {"tasks": {t: round(v, 2) for t, v in tasks.items()}, "average": round(averages[n], 2)}
                for n, tasks in by_length.items()
            },
            "average": round(sum(averages.values()) / len(averages), 2),
        }
    return {"threshold": round(100 * threshold, 2), "models": models, "table": ruler.table(scores, 100 * threshold)}


def summary_words(data: ReportData, threshold: float) -> list[dict[str, str]]:
    """The summary per model in sentences, as a reader would quote it."""
    lines = []
    for label in data.models:
        rows = data.heat.get(label, [])
        lengths = [r for r in data.lengths if r["model"] == label]
        tally = data.tallies.get(label, Tally())
        parts = []
        if rows or lengths:  # a task without depths (GraphWalks, MRCR): pass rates per length only
            s = model_summary(rows or lengths)
            rate = f"{s['rate']:.1%} of {s['n']} cells pass (95% CI {s['ci_low']:.1%}-{s['ci_high']:.1%})"
            if rows:
                longest = s["all_depths_pass_up_to"]
                rate += "; " + (
                    f"every depth passes up to {longest:,} tokens" if longest else "at no length does every depth pass"
                )
            parts.append(rate)
            eff = effective_length(lengths, threshold)
            shortest = min(r["context_length"] for r in lengths)
            parts.append(
                f"effective length {_length(eff['length'], shortest)} tokens at a pass rate of {threshold:.1%} "
                f"(95%: {_length(eff['low'], shortest)} to {_length(eff['high'], shortest)})"
            )
        if tally.needles_found.n:
            parts.append(f"{tally.needles_found.value:.1%} of needles found on average")
        if tally.judge_scores.n:
            parts.append(f"mean judge score {tally.judge_scores.value:.1f} of 10")
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
                "flipped": c.flipped[:200],
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


def render_page(
    runs: list[Run],
    data: ReportData,
    drawn: list[tuple[str, str, Any]],
    browser: list[dict[str, Any]],
    folder: Path,
) -> str:
    """The page's HTML. ``drawn`` are the charts (name, model, chart); ``browser`` the cell data per model, each
    with the file it is in; inlined when all of it is small enough."""
    from jinja2 import Environment, select_autoescape
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
    payload = {
        "charts": [{"name": n, "kind": kinds[n], "model": model, "spec": c.to_dict()} for n, model, c in drawn],
        "models": models,
        "shown": SHOWN,
    }
    variants = sorted({p["name"] for r in runs for p in r.spec.get("prompts", [])})
    lengths = sorted({r["context_length"] for rows in data.heat.values() for r in rows})
    depths = sorted({r["depth"] for rows in data.heat.values() for r in rows})
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    template = env.from_string(_asset("page.html.j2"))
    names = run_labels(runs) if len(runs) > 1 else [None]
    return template.render(
        title=title,
        description=runs[0].spec.get("description"),
        version=__version__,
        runs=[_run_header(r, n) for r, n in zip(runs, names, strict=True)],
        summary=summary_rows(data, threshold),
        score_tables=score_tables(data, threshold, _metric(runs[0].spec)),
        threshold_score=f"{100 * threshold:.1f}",
        words=summary_words(data, threshold),
        threshold=f"{threshold:.1%}",
        notes=_notes(runs),
        comparisons=_comparison_rows(data.comparisons),
        cache_arms=_cache_arm_rows(data.cache_arms),
        charts=[{"name": n} for n, _, _ in drawn],
        browser_models=[m["label"] for m in models],
        lengths=lengths,
        depths=[f"{d:g}" for d in depths],
        variants=variants,
        css=Markup(_raw_script(_asset("page.css"))),
        data_json=Markup(script_json(payload)),
        vega=Markup(vega_bundle()),
        script=Markup(_raw_script(_asset("page.js"))),
    )
