"""Report numbers: Wilson intervals, summary.csv and the summary at the top of index.html."""

import csv
import os

import pytest

from nspec.runners.report import build_report, collect, effective_length, model_summary, wilson
from nspec.runners.run_store import Run
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
    assert "91.7% of 12 cells pass (95% CI 64.6%-98.5%); every depth passes up to 400 tokens" in page


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

    from nspec.compiler.run_writer import compile_run
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
    assert "location" in [name for name, _, _ in charts(data, ("location",))]


def rows(*rates):
    """Length rows as collect() makes them: (length, passes, n)."""
    out = []
    for length, passes, n in rates:
        low, high = wilson(passes, n)
        out.append({"context_length": length, "rate": passes / n, "ci_low": low, "ci_high": high})
    return out


def test_effective_length_is_the_longest_prefix_at_the_threshold_with_its_uncertainty():
    data = rows((1000, 50, 50), (2000, 48, 50), (4000, 45, 50), (8000, 50, 50), (16000, 10, 50))
    # 4000 drops to 90%: still above 85.6% (its Wilson bound is not); 8000 is back at 100%, 16000 far below.
    assert effective_length(data, 0.856) == {"length": 8000, "low": 2000, "high": 8000}
    assert effective_length(rows((1000, 1, 2), (2000, 2, 2)), 0.856) == {"length": None, "low": None, "high": 2000}
    # A dip at a short length ends the effective length there, whatever follows.
    assert effective_length(rows((1000, 20, 20), (2000, 10, 20), (4000, 20, 20)), 0.8)["length"] == 1000


def test_summary_counts_judge_errors_partial_credit_and_why_controls_failed(spec_file, tmp_path):
    import json

    run, _ = scored_run(spec_file, tmp_path)
    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    negatives = [s for s in scores if s["negative"]]
    needles = [s for s in scores if not s["negative"]]
    negatives[0].update(verdict="fail", reason="invents a value")
    negatives[1].update(verdict="fail", reason="does not say the answer is missing")
    negatives[2].update(verdict="fail", reason="judges: 0 of 3 votes pass (majority)")
    needles[0].update(verdict="undecided", judge_error=True, reason="judge error: 1 of 3 judges gave a verdict")
    needles[1].update(verdict="undecided", reason="auto: hedges")
    for s in needles[2:]:
        s["needles_found"] = 0.5
        s["judge_score"] = 8
    (run / "scores.jsonl").write_text("".join(json.dumps(s) + "\n" for s in scores))
    # A chart an earlier report drew that this one will not: removed when the report is rebuilt.
    (run / "report").mkdir()
    (run / "report" / "heatmap-gone-model.png").write_bytes(b"old")
    (run / "report" / "notes.png").write_bytes(b"the user's own file")
    page = build_report([Run(run)]).read_text()
    assert not (run / "report" / "heatmap-gone-model.png").exists() and (run / "report" / "notes.png").exists()
    n = len(needles) - 2
    assert f"{(n - 1) / n:.1%} of {n} cells pass" in page  # the two undecided cells count in no pass rate
    assert "1 cell undecided (judge error), in no pass rate; 1 cell undecided (no judge), in no pass rate" in page
    assert "50.0% of needles found on average" in page and "mean judge score 8.0 of 10" in page
    assert (
        f"negative controls: 3 of {len(negatives)} answered wrongly "
        "(1 did not say not found, 1 invented a value, 1 judged wrong)"
    ) in page
    summary = list(csv.DictReader((run / "report" / "summary.csv").read_text().splitlines()))
    assert {r["needles_found"] for r in summary} == {"0.5"}
    data = collect([Run(run)])
    assert sorted((r["reason"], r["count"]) for r in data.negative_reasons) == [
        ("did not say not found", 1),
        ("invented a value", 1),
        ("judged wrong", 1),
    ]


def test_the_compile_s_fallbacks_are_in_the_report(spec_file, tmp_path):
    import json

    run, _ = scored_run(spec_file, tmp_path)  # claude-haiku-4-5 is counted by a proxy
    manifest = json.loads((run / "manifest.json").read_text())
    assert any(n["kind"] == "estimated_tokens" for n in manifest["fallbacks"])
    page = build_report([Run(run)]).read_text()
    assert "<h2>Notes</h2>" in page
    assert "anthropic/claude-haiku-4-5: token counts are estimated (proxy:o200k_base*1)" in page


def test_two_runs_compared_cell_by_cell_with_mcnemar(spec_file, tmp_path):
    import json

    from nspec.runners.report import mcnemar

    first, _ = scored_run(spec_file, tmp_path / "a")
    second, _ = scored_run(spec_file, tmp_path / "b")
    scores = [json.loads(line) for line in (second / "scores.jsonl").read_text().splitlines()]
    passing = [s for s in scores if not s["negative"] and s["verdict"] == "pass"]
    for s in passing[:6]:  # the second run fails six cells the first passed
        s["verdict"] = "fail"
    (second / "scores.jsonl").write_text("".join(json.dumps(s) + "\n" for s in scores))
    data = collect([Run(first), Run(second)])
    (comparison,) = data.comparisons
    assert comparison.model == "openai/gpt-4.1-mini" and comparison.shared == 12
    assert (comparison.first_passes, comparison.second_passes) == (11, 5)
    assert (comparison.only_first, comparison.only_second) == (6, 0)
    assert comparison.p_value == pytest.approx(mcnemar(6, 0)) == pytest.approx(2 * 0.5**6)
    assert len(comparison.flipped) == 6 and {f["first"] for f in comparison.flipped} == {"pass"}
    page = build_report([Run(first), Run(second)], tmp_path / "compare").read_text()
    assert "<h2>Comparison</h2>" in page and "a change beyond noise (p &lt; 0.05)" in page
    assert "-50.0 points" in page


def test_mcnemar_exact_values():
    from nspec.runners.report import mcnemar

    assert mcnemar(0, 0) == 1.0
    assert mcnemar(5, 5) == 1.0
    assert mcnemar(1, 9) == pytest.approx(0.021484375)  # 2 * (1 + 10) / 1024
    assert mcnemar(30, 70) < 1e-4 < mcnemar(45, 55)


def test_every_cell_is_exported_and_small_runs_inline_their_cells(spec_file, tmp_path):
    import json

    run, _ = scored_run(spec_file, tmp_path)
    page = build_report([Run(run)]).read_text()
    rows = list(csv.DictReader((run / "report" / "cells.csv").read_text().splitlines()))
    cells = (run / "cells.jsonl").read_text().splitlines()
    assert len(rows) == len(cells)  # every cell, the unscored ones too (empty verdict)
    scored = [r for r in rows if r["verdict"]]
    assert len(scored) == 16 and {r["model"] for r in scored} == {"openai/gpt-4.1-mini"}
    assert all(json.loads(r["needles"]) is not None and r["counted_by"] for r in rows)
    (data_file,) = (run / "report" / "cells").iterdir()
    browsed = json.loads(data_file.read_text())
    assert len(browsed) == 16 and all(
        c["excerpt"] is None or c["excerpt"]["needle"] in c["excerpt"]["needle"] for c in browsed
    )
    with_needle = [c for c in browsed if not c["negative"]]
    assert all(c["excerpt"]["needle"].startswith("The special magic") for c in with_needle)
    assert '"cells":[{' in page  # small: inline, so the page works from file://


def test_big_runs_keep_their_cells_beside_the_page(spec_file, tmp_path, monkeypatch):
    from nspec.runners.report import page as page_module

    run, _ = scored_run(spec_file, tmp_path)
    monkeypatch.setattr(page_module, "EMBED_BYTES", 100)
    page = build_report([Run(run)]).read_text()
    assert '"cells":null' in page and '"file":"cells/openai-gpt-4-1-mini-1.json"' in page


def test_view_serves_the_report_folder_on_this_machine_only(spec_file, tmp_path):
    import json
    import signal
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    run, _ = scored_run(spec_file, tmp_path)  # no report yet: view builds it first
    errors = tmp_path / "view.err"
    server = subprocess.Popen(
        [sys.executable, "-m", "nspec", "view", str(run), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=errors.open("w"),
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # a SIGABRT prints where each thread is
    )
    try:
        line = server.stdout.readline()
        assert line.startswith("report: http://127.0.0.1:") and line.rstrip().endswith("(Ctrl-C stops)"), line
        url = line.split()[1]
        with urllib.request.urlopen(url) as response:
            assert "<title>small</title>" in response.read().decode()
        base = url.rsplit("/", 1)[0]
        with urllib.request.urlopen(f"{base}/cells/openai-gpt-4-1-mini-1.json") as response:
            assert len(json.load(response)) == 16
        for outside in ("/../cells.jsonl", "/%2e%2e/manifest.json", "/cells/"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(base + outside)
            assert refused.value.code == 404
    finally:
        server.send_signal(signal.SIGINT)
        try:
            code = server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.send_signal(signal.SIGABRT)
            server.wait(timeout=20)
            pytest.fail(f"nspec view did not stop on SIGINT; where it was:\n{errors.read_text()[-6000:]}")
        assert code == 0, errors.read_text()


def test_cells_parquet_has_the_csv_s_rows_with_types(spec_file, tmp_path):
    import pyarrow.parquet as pq

    run, _ = scored_run(spec_file, tmp_path)
    build_report([Run(run)])
    table = pq.read_table(run / "report" / "cells.parquet")
    rows = list(csv.DictReader((run / "report" / "cells.csv").read_text().splitlines()))
    assert table.num_rows == len(rows) and table.column_names == list(rows[0])
    assert str(table.schema.field("context_length").type) == "int64"
    assert str(table.schema.field("depth").type) == "double" and str(table.schema.field("negative").type) == "bool"
    assert table.column("cell_id").to_pylist() == [r["cell_id"] for r in rows]
    verdicts = table.column("verdict").to_pylist()
    assert verdicts.count(None) == sum(1 for r in rows if not r["verdict"])  # unscored cells: null, not ""


def copied(run, copies):
    """The run ``copies`` times as large: each of its cells, with its request, result and score, again under new
    ids (the order of every file kept, as `joined` reads them side by side)."""
    import json

    files = [run / "cells.jsonl", run / "answers" / "results.jsonl", run / "scores.jsonl"]
    for path in [*files, *sorted((run / "answers" / "requests").glob("*.jsonl"))]:
        lines = path.read_text().splitlines(keepends=True)
        ids = [json.loads(line).get("cell_id") or json.loads(line)["custom_id"] for line in lines]
        with open(path, "w") as fh:
            for k in range(copies):
                fh.writelines(line.replace(f'"{cid}"', f'"{cid}-{k}"') for cid, line in zip(ids, lines, strict=True))


def test_the_report_s_memory_does_not_grow_with_its_cells(spec_file, tmp_path, monkeypatch):
    """The report's pass over a run (every cell joined to its request, result and score, folded into the
    aggregates and written to the exports as it passes) holds aggregates, not cells: from 128 to 512 cells its peak
    of Python memory grows by less than 200 bytes a cell (the results and scores indexes take 16; a list of the
    cells, or of their rows, would take kilobytes)."""
    import shutil
    import tracemalloc

    from nspec.runners.report.data import CellExport, ParquetSink

    monkeypatch.setattr(ParquetSink, "GROUP", 64)  # a row group is buffered whole: smaller than the runs measured
    compiled, _ = scored_run(spec_file, tmp_path / "compiled")

    def peak(copies):
        run = shutil.copytree(compiled, tmp_path / f"x{copies}")
        copied(run, copies)
        tracemalloc.start()
        export = CellExport(tmp_path / f"report-{copies}")
        try:
            collect([Run(run)], export)
        finally:
            export.close()
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top, sum(1 for _ in open(run / "cells.jsonl"))

    peak(1)  # what the first pass loads once (modules, caches) is not what grows
    (small, cells_small), (large, cells_large) = peak(4), peak(16)
    assert (cells_small, cells_large) == (128, 512)
    assert (large - small) / (cells_large - cells_small) < 200
