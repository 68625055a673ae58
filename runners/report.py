"""The report: per model, the depth x context-length heatmap of mean scores (needlehaystack's red-yellow-green),
as `report/index.html` (Vega libraries inlined: it works offline from file://) and one PNG per model; `summary.csv`
with pass rates and Wilson 95% intervals per model, length and depth; and a summary at the top of the page."""

from __future__ import annotations

import csv
import html
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from nspec.runners.rundir import Run

RAMP = ["#F0496E", "#EBB839", "#0CD79F"]
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


def heatmap_data(run: Run) -> dict[str, list[dict[str, Any]]]:
    """Per model: mean score, passes and n for each (length, depth) of the needle cells that were scored."""
    cells = {c["cell_id"]: c for c in run.cells()}
    groups: dict[tuple[str, int, float], list[float]] = defaultdict(list)
    with open(run.path / "scores.jsonl", encoding="utf-8") as fh:
        for line in fh:
            s = json.loads(line)
            cell = cells[s["cell_id"]]
            if cell["negative"] or s["score"] is None:
                continue
            label = cell["model"] + (f" ({cell['prompt']})" if cell["prompt"] else "")
            groups[(label, cell["context_length"]["target"], cell["depth"]["requested"])].append(s["score"])
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (label, length, depth), scores in sorted(groups.items()):
        passes = sum(1 for s in scores if s >= 1)
        low, high = wilson(passes, len(scores))
        out[label].append(
            {
                "context_length": length,
                "depth": depth,
                "score": sum(scores) / len(scores),
                "n": len(scores),
                "passes": passes,
                "rate": passes / len(scores),
                "ci_low": round(low, 4),
                "ci_high": round(high, 4),
            }
        )
    return dict(out)


SUMMARY_FIELDS = ("model", "context_length", "depth", "n", "passes", "rate", "ci_low", "ci_high")


def write_summary(data: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """summary.csv: one row per model x length x depth."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=SUMMARY_FIELDS)
        writer.writeheader()
        for label, rows in data.items():
            for row in rows:
                writer.writerow(
                    {"model": label, **{k: round(row[k], 4) if k == "rate" else row[k] for k in SUMMARY_FIELDS[1:]}}
                )


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


def _summary_html(data: dict[str, list[dict[str, Any]]]) -> str:
    items = []
    for label, rows in data.items():
        s = model_summary(rows)
        longest = f"{s['all_depths_pass_up_to']:,} tokens" if s["all_depths_pass_up_to"] else "no length"
        rate = (
            "no scored cells"
            if s["rate"] is None
            else (f"{s['rate']:.1%} of {s['n']} cells pass (95% CI {s['ci_low']:.1%}-{s['ci_high']:.1%})")
        )
        items.append(f"<li><b>{html.escape(label)}</b>: every depth passes up to {longest}; {rate}</li>")
    return "<section><h2>Summary</h2><ul>" + "".join(items) + "</ul></section>"


def heatmap(label: str, rows: list[dict[str, Any]]) -> Any:
    import altair as alt

    base = alt.Chart(alt.Data(values=rows), title=f"{label}: mean score by depth and context length")
    rect = base.mark_rect().encode(
        x=alt.X("context_length:O", title="Context length (tokens)"),
        y=alt.Y("depth:O", title="Depth (%)", sort="ascending"),
        color=alt.Color("score:Q", title="Score", scale=alt.Scale(domain=[0, 0.5, 1], range=RAMP)),
        tooltip=["context_length:O", "depth:O", alt.Tooltip("score:Q", format=".2f"), "passes:Q", "n:Q"],
    )
    text = base.mark_text(fontSize=10).encode(
        x="context_length:O", y=alt.Y("depth:O", sort="ascending"), text=alt.Text("score:Q", format=".2f")
    )
    return (rect + text).properties(width=alt.Step(48), height=alt.Step(22))


def build_report(run: Run) -> Path:
    import altair as alt
    import vl_convert as vlc

    folder = run.path / "report"
    folder.mkdir(exist_ok=True)
    data = heatmap_data(run)
    charts = []
    for i, (label, rows) in enumerate(data.items(), 1):
        chart = heatmap(label, rows)
        (folder / f"heatmap-{i}.png").write_bytes(vlc.vegalite_to_png(chart.to_dict(), scale=2))
        charts.append(chart)
    write_summary(data, folder / "summary.csv")
    title = run.spec.get("report", {}).get("title", run.spec["name"])
    if charts:
        page = vlc.vegalite_to_html(alt.vconcat(*charts).to_dict(), bundle=True)
        page = page.replace("<head>", f"<head>\n    <title>{html.escape(title)}</title>", 1)
        page = page.replace("<body>", f"<body>\n<h1>{html.escape(title)}</h1>\n{_summary_html(data)}", 1)
    else:
        page = (
            f"<!DOCTYPE html><html><head><title>{html.escape(title)}</title></head><body><p>No scored cells "
            "yet.</p></body></html>"
        )
    (folder / "index.html").write_text(page, encoding="utf-8")
    return folder / "index.html"
