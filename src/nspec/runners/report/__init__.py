"""The report of one run, or of several compared: `report/index.html` (works offline: a header, the summary table,
the charts, the cell browser), one PNG per chart rendered from the same specs, `summary.csv` (per model, length and
depth or point of the family's axes), `cells.csv` (every recorded field of every cell; `cells.parquet` too when
pyarrow is installed) and `cells/` (the browser's data); for a family that declares a headline table (RULER's
results table, over its tasks), the table as `<name>.md` and `<name>.json`. What the page shows of the cells — their
axes, their details, the table — comes from the family's declaration (`view`), and what their scores add up to from
the metric of the spec's first scorer (`nspec.scorers`). Built from the run directory a cell at a time (`data`), so
memory holds aggregates, not the run."""

from __future__ import annotations

import json
from pathlib import Path

from nspec.runners.report.charts import CHARTS, charts
from nspec.runners.report.data import CellExport, ReportData, collect, slug, write_summary
from nspec.runners.report.headline import HEAD, summary
from nspec.runners.report.page import render_page, summary_rows
from nspec.runners.report.stats import effective_length, mcnemar, model_summary, wilson
from nspec.runners.run_store import Run

__all__ = [
    "build_report",
    "charts",
    "collect",
    "effective_length",
    "headline_tables",
    "mcnemar",
    "model_summary",
    "printed_tables",
    "wilson",
]


def chart_files(folder: Path) -> list[Path]:
    """The chart images in a report folder, by the names `charts` gives them."""
    fixed = {f"{name}.png" for name in CHARTS}
    prefixes = ("heatmap-", "negatives-")
    return [p for p in folder.glob("*.png") if p.name in fixed or p.name.startswith(prefixes)]


def headline_tables(folder: Path) -> list[Path]:
    """The headline tables in a report folder (`<name>.md`, each with its `.json`), told by how they start."""
    tables = []
    for path in sorted(folder.glob("*.md")):
        with open(path, encoding="utf-8") as fh:
            if fh.read(len(HEAD)) == HEAD:
                tables.append(path)
    return tables


SUMMARY = "summary.md"  # the page's summary table, in Markdown: what `nspec run` and `nspec report` print without one


def printed_tables(folder: Path) -> list[Path]:
    """What a report folder says in a terminal: its headline tables (RULER's), else its summary table."""
    return headline_tables(folder) or [p for p in (folder / SUMMARY,) if p.is_file()]


def _write_summary(data: ReportData, threshold: float, folder: Path) -> None:
    """The page's summary table (`page.summary_rows`: per model its cells, pass rate, score and effective length)
    as Markdown."""
    label = data.metric.label
    score = label[:1].upper() + label[1:] + (" (%)" if data.metric.percent else "")
    head = ["Model", "Cells", "Pass rate (95% CI)", score, "Effective length (95% CI)"]
    lines = ["|" + "|".join(head) + "|", "|" + "|".join([":---"] + ["---:"] * (len(head) - 1)) + "|"]
    for row in summary_rows(data, threshold):
        lines.append("|" + "|".join([row["model"], row["cells"], row["rate"], row["score"], row["effective"]]) + "|")
    (folder / SUMMARY).write_text("\n".join(lines) + "\n", encoding="utf-8")


def _write_headline(data: ReportData, threshold: float, folder: Path) -> None:
    """The family's headline table, as RULER's README prints it (`<name>.md`) and as data (`<name>.json`); a table
    an earlier build wrote and this one does not is removed."""
    table = summary(data, threshold)
    name = slug(data.view.table.name) if data.view.table is not None and table is not None else None
    for stale in headline_tables(folder):
        if stale.stem != name:
            stale.unlink()
            stale.with_suffix(".json").unlink(missing_ok=True)
    if name is not None and table is not None:
        (folder / f"{name}.md").write_text(table["table"] + "\n", encoding="utf-8")
        (folder / f"{name}.json").write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")


def build_report(runs: list[Run], folder: Path | None = None) -> Path:
    """Write the report of one run (into its report/) or of several (into the first's, unless ``folder``)."""
    import vl_convert as vlc

    folder = folder or runs[0].path / "report"
    folder.mkdir(parents=True, exist_ok=True)
    export = CellExport(folder)
    try:
        data: ReportData = collect(runs, export)
    finally:
        export.close()
    wanted = tuple(runs[0].spec.get("report", {}).get("charts", CHARTS))
    drawn = [(name, model, chart.to_dict()) for name, model, chart in charts(data, wanted)]  # validated once
    keep = {f"{name}.png" for name, _, _ in drawn}
    for stale in chart_files(folder):
        if stale.name not in keep:
            stale.unlink()  # a chart an earlier report drew and this one does not (a judge gone, say)
    for name, _, spec in drawn:
        (folder / f"{name}.png").write_bytes(vlc.vegalite_to_png(spec, scale=2))
    write_summary(data, folder / "summary.csv")
    threshold = float(runs[0].spec.get("report", {}).get("effective_length_threshold", 0.856))
    _write_headline(data, threshold, folder)
    _write_summary(data, threshold, folder)
    browser = [
        {"label": label, "count": export.counts[label], "path": str(path), "file": f"cells/{path.name}"}
        for label, path in export.files.items()
    ]
    page = render_page(runs, data, drawn, browser, folder)
    target = folder / "index.html"
    part = folder / ".index.html.part"
    part.write_text(page, encoding="utf-8")
    part.replace(target)  # a reader (nspec view) never sees half a page
    return target
