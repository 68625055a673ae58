"""The report from what a family declares (the manifest's `task.view`): the axes its cells group by, what a cell shows
beside its question and answer, and its headline table; for a run compiled before the manifest held it, the same from
the family's axes. A family without depths has no depth anywhere on its page; every length is written one way."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nspec.runners.report import build_report, headline_tables, notation
from nspec.runners.run_store import Run
from tests.families import families  # noqa: F401 - a fixture

SPEC = """\
nspec: 1
name: count
seed: 3
task: {name: counting, params: {word: fig}}
grid: {context_lengths: [1024, 1500], params: {vocabulary: [3, 5]}, trials: 2}
prompt: {system: "Answer with a number.", reserve_tokens: 20}
models: [{id: openai/gpt-4.1-mini}]
"""
VIEW = {
    "axes": [{"key": "vocabulary", "label": "Words to count from"}],
    "details": [{"label": "list length", "field": "data.words"}, {"label": "absent", "field": "data.nothing"}],
    "table": {"name": "counting", "title": "Counting <words>", "axis": "vocabulary"},
}

pytestmark = pytest.mark.usefixtures("families")


def scored(cli, spec_file, tmp_path: Path, view: dict | None) -> Path:
    """The counting family's run, every answer right but the second trial's at 1,500 tokens, scored; with ``view``
    written into its manifest as the compiler writes it (None: none, as a run compiled before manifests held it)."""
    result = cli("compile", spec_file(SPEC), "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    run = Path(result.out.strip().splitlines()[-1])
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["task"].pop("view", None)
    if view is not None:
        manifest["task"]["view"] = view
    (run / "manifest.json").write_text(json.dumps(manifest))
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    results = [
        {
            "cell_id": cell["cell_id"],
            "stage": "answers",
            "model": cell["model"],
            "status": "ok",
            "text": "none" if cell["trial"] == 1 and cell["context_length"]["target"] == 1500 else cell["expected"][0],
            "usage": {"input_tokens": 10, "output_tokens": 1},
            "source": {"kind": "batch"},
        }
        for cell in cells
    ]
    (run / "answers" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    assert cli("score", str(run)).code == 0
    return run


def outside_scripts(page: str) -> str:
    """The page as a reader sees it: without its scripts, its style and the data the scripts read."""
    return re.sub(r"<(script|style)\b.*?</\1>", "", page, flags=re.S)


@pytest.mark.parametrize("view", [VIEW, None], ids=["declared", "from the family's axes"])
def test_a_family_without_depths_has_no_depth_on_its_page(cli, spec_file, tmp_path, view):
    run = scored(cli, spec_file, tmp_path, view)
    page = build_report([Run(run)]).read_text()
    assert "depth" not in outside_scripts(page).lower()
    data = json.loads(re.search(r'<script type="application/json" id="nspec-data">(.*?)</script>', page, re.S)[1])
    assert "depth" not in json.dumps(data).lower()  # the charts, the browser's axes and its cells
    (cells,) = [m["cells"] for m in data["models"]]
    assert len(cells) == 8 and all(set(c["axes"]) == {"vocabulary"} for c in cells)
    label = "Words to count from" if view else "Vocabulary"
    assert data["axes"] == [{"key": "vocabulary", "label": label}]
    assert f'<label>{label} <select name="axis-vocabulary"><option value="">all</option><option>3</option>' in page


def test_a_cell_shows_the_details_its_family_declares(cli, spec_file, tmp_path):
    run = scored(cli, spec_file, tmp_path, VIEW)
    build_report([Run(run)])
    (browsed,) = (run / "report" / "cells").iterdir()
    cells = {c["id"]: c for c in json.loads(browsed.read_text())}
    recorded = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    for cell in recorded:
        shown = cells[cell["cell_id"]]
        assert shown["question"] == cell["question"] and shown["expected"] == cell["expected"]
        assert shown["details"] == [{"label": "list length", "value": str(cell["data"]["words"])}]  # none absent


def test_the_headline_table_is_the_one_the_family_declares(cli, spec_file, tmp_path):
    run = scored(cli, spec_file, tmp_path, VIEW)
    folder = run / "report"
    folder.mkdir()
    (folder / "ruler.md").write_text("|Model|Effective Length|4K|\n")  # an earlier build's table, not this one's
    (folder / "ruler.json").write_text("{}")
    (folder / "notes.md").write_text("The user's own notes.\n")
    page = build_report([Run(run)]).read_text()
    assert headline_tables(folder) == [folder / "counting.md"]
    assert not (folder / "ruler.json").exists() and (folder / "notes.md").exists()
    table = json.loads((folder / "counting.json").read_text())
    (model,) = table["models"].values()
    assert model["lengths"]["1024"] == {"tasks": {"3": 100.0, "5": 100.0}, "average": 100.0}
    assert model["lengths"]["1500"] == {"tasks": {"3": 50.0, "5": 50.0}, "average": 50.0}
    assert (model["effective_length"], model["effective_label"], table["threshold"]) == (1024, "1K", 85.6)
    assert (folder / "counting.md").read_text().splitlines() == [
        "|Model|Effective Length|1K|1,500|Avg.|wAvg. (inc)|wAvg. (dec)|",
        "|:---:|:---:|:---:|:---:|:---:|:---:|:---:|",
        "|openai/gpt-4.1-mini|1K|<ins>100.0</ins>|50.0|75.0|66.7|83.3|",
    ]
    assert "<caption>Counting &lt;words&gt;</caption>" in page  # its title, as text
    printed = cli("report", str(run))
    assert printed.out.startswith("|Model|Effective Length|1K|1,500|"), printed.out


def test_every_length_on_the_page_is_written_one_way(cli, spec_file, tmp_path):
    run = scored(cli, spec_file, tmp_path, VIEW)
    text = outside_scripts(build_report([Run(run)]).read_text())
    # the summary's effective length (by pass rate, with its interval), the tables' (by score) and their columns
    assert "<td>1K (&lt;1K to 1K)</td>" in text
    assert "effective length 1K tokens at a pass rate of 85.6% (95%: &lt;1K to 1K)" in text
    assert "by vocabulary: effective length 1K (" in text and "<th>1K</th><th>1,500</th>" in text
    assert '<option value="1024">1K</option><option value="1500">1,500</option>' in text
    assert not re.search(r">1,024<|\b1,024 tokens|\b1024\b|\b1\.5k\b", text.replace('value="1024"', ""))


@pytest.mark.parametrize(
    "value, lengths, written",
    [
        (4096, [4096, 8192], "4K"),
        (131072, [4096, 131072], ">128K"),
        (None, [4096, 8192], "<4K"),
        (1500, [1000, 1500, 2000], "1,500"),
        (128000, [1000, 128000], ">128,000"),  # 125 x 1,024, but chosen as a round thousand
        (3072, [1024, 3072], ">3K"),
    ],
)
def test_the_notation(value, lengths, written):
    assert notation.effective(value, lengths) == written


def test_a_needle_run_compiled_before_the_view_is_shown_as_its_declared_view_shows_it(spec_file, tmp_path):
    """A run whose manifest has no view is shown by its family's axes (here the needle family's depth), as the view
    the compiler declares for it shows it."""
    from tests.test_audit import scored_run

    older, _ = scored_run(spec_file, tmp_path / "older")
    newer, _ = scored_run(spec_file, tmp_path / "newer")
    manifest = json.loads((older / "manifest.json").read_text())
    manifest.pop("task", None)  # as compiled before manifests held a task for every spec
    (older / "manifest.json").write_text(json.dumps(manifest))
    manifest = json.loads((newer / "manifest.json").read_text())
    axes = [{"key": "depth", "label": "Depth (%)"}]
    manifest["task"] = {"name": "needle", "version": "1", "params": {}, "axes": ["depth"], "view": {"axes": axes}}
    (newer / "manifest.json").write_text(json.dumps(manifest))
    pages = [outside_scripts(build_report([Run(run)]).read_text()) for run in (older, newer)]
    pages = [re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "(when)", page) for page in pages]  # made a minute apart
    assert pages[0] == pages[1].replace(str(newer), str(older))
    assert "Every depth passes up to" in pages[0] and 'name="axis-depth"' in pages[0]
    cells = [json.loads(next((run / "report" / "cells").iterdir()).read_text()) for run in (older, newer)]
    assert cells[0] == cells[1] and cells[0][0]["axes"].keys() <= {"depth"} and "depth_actual" in cells[0][0]
