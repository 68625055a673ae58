"""Report numbers: Wilson intervals, summary.csv and the summary at the top of index.html."""

import csv

import pytest

from nspec.runners.report import build_report, collect, model_summary, wilson
from nspec.runners.rundir import Run
from tests.test_audit import scored_run


@pytest.mark.parametrize(
    "passes, n, low, high",
    [
        (0, 10, 0.0, 0.2775),  # p = 0: the interval still admits up to 28%
        (5, 10, 0.2366, 0.7634),
        (10, 10, 0.7225, 1.0),
        (1, 1, 0.2065, 1.0),
        (45, 50, 0.7864, 0.9565),
    ],
)
def test_wilson_known_values(passes, n, low, high):
    got = wilson(passes, n)
    assert got == pytest.approx((low, high), abs=5e-5)


def test_wilson_without_data():
    assert wilson(0, 0) == (0.0, 1.0)


def test_summary_csv_and_page(spec_file, tmp_path):
    run, _ = scored_run(spec_file, tmp_path)  # gpt-4.1-mini: 2 lengths x 3 depths x 2 trials; (900, 40) fails once
    page = build_report([Run(run)]).read_text()
    rows = list(csv.DictReader((run / "report" / "summary.csv").read_text().splitlines()))
    assert [r["model"] for r in rows] == ["openai/gpt-4.1-mini"] * 6
    assert [(r["context_length"], r["depth"]) for r in rows] == [
        ("400", "0.0"),
        ("400", "40.0"),
        ("400", "100.0"),
        ("900", "0.0"),
        ("900", "40.0"),
        ("900", "100.0"),
    ]
    mixed = rows[4]
    assert (mixed["n"], mixed["passes"], mixed["rate"]) == ("2", "1", "0.5")
    assert (float(mixed["ci_low"]), float(mixed["ci_high"])) == pytest.approx(wilson(1, 2), abs=1e-4)
    assert all(r["rate"] == "1.0" for i, r in enumerate(rows) if i != 4)
    summary = model_summary(collect([Run(run)]).heat["openai/gpt-4.1-mini"])
    assert summary["all_depths_pass_up_to"] == 400 and (summary["passes"], summary["n"]) == (11, 12)
    assert "<h2>Summary</h2>" in page
    assert "every depth passes up to 400 tokens; 91.7% of 12 cells pass (95% CI 64.6%-98.5%)" in page


def test_several_runs_in_one_report(spec_file, tmp_path):
    first, _ = scored_run(spec_file, tmp_path / "a")
    second, _ = scored_run(spec_file, tmp_path / "b")
    runs = [Run(first), Run(second)]
    data = collect(runs)
    labels = sorted(data.heat)
    run_id = runs[0].run_id[:6]  # the same spec twice: the same run id, told apart by position
    assert labels == [f"openai/gpt-4.1-mini · small/{run_id}#1", f"openai/gpt-4.1-mini · small/{run_id}#2"]
    out = tmp_path / "compare"
    page = build_report(runs, out).read_text()
    assert (out / "summary.csv").is_file() and "small vs small" in page
    assert {line.split(",")[0] for line in (out / "summary.csv").read_text().splitlines()[1:]} == set(labels)


def test_location_chart_for_stacks(tmp_path, monkeypatch):
    """A needlestack run gets NIAN's pass rate by location, one line per repeat count."""
    import json

    from nspec.compiler.run_directory import compile_run
    from nspec.runners.report import charts
    from nspec.spec import load_spec
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT / "tests" / "golden" / "specs")
    loaded = load_spec("stack.yaml")
    run = compile_run(loaded.data, loaded.base_dir, tmp_path, {}).path
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    scores = [
        {
            "cell_id": c["cell_id"],
            "verdict": "pass" if c["repeat"] == 2 or c["depth"]["requested"] < 50 else "fail",
            "scorers": [],
            "votes": [],
        }
        for c in cells
    ]
    (run / "scores.jsonl").write_text("".join(json.dumps(s) + "\n" for s in scores))
    data = collect([Run(run)])
    by_repeat = {(r["location"], r["repeat"]): r["rate"] for r in data.locations}
    assert by_repeat == {(1.0, "1"): 1.0, (1.0, "2"): 1.0, (98.0, "1"): 0.0, (98.0, "2"): 1.0}
    assert "location" in [name for name, _ in charts(data, ("location",))]
