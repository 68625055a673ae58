"""The report: per model, the depth x context-length heatmap of mean scores (needlehaystack's red-yellow-green),
as `report/index.html` (Vega libraries inlined: it works offline from file://) and one PNG per model."""

from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from nspec.runners.rundir import Run

RAMP = ["#F0496E", "#EBB839", "#0CD79F"]


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
        out[label].append(
            {
                "context_length": length,
                "depth": depth,
                "score": sum(scores) / len(scores),
                "n": len(scores),
                "passes": sum(1 for s in scores if s >= 1),
            }
        )
    return dict(out)


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
    title = run.spec.get("report", {}).get("title", run.spec["name"])
    if charts:
        page = vlc.vegalite_to_html(alt.vconcat(*charts).to_dict(), bundle=True)
        page = page.replace("<head>", f"<head>\n    <title>{html.escape(title)}</title>", 1)
    else:
        page = (
            f"<!DOCTYPE html><html><head><title>{html.escape(title)}</title></head><body><p>No scored cells "
            "yet.</p></body></html>"
        )
    (folder / "index.html").write_text(page, encoding="utf-8")
    return folder / "index.html"
