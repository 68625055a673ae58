"""The worked plugin of CONTRIBUTING.md, `examples/tally`: a task family with its own scorer and metric, in a
distribution of its own. The test installs it with pip, as a user would, and runs it end to end against the emulator
without a file of nspec touched: validate (its scorer's options checked, located), compile, run in batch, score with
its scorer, report by its metric, its headline table and its cells' details."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nspec.runners.emulator.config import Degrade, Responder
from nspec.runners.emulator.responders import make_responder
from tests.distributions import EXAMPLES, pip_install, reload_plugins

EXAMPLE = EXAMPLES / "tally"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pip_install("tally", tmp_path_factory.mktemp("site"))


@pytest.fixture
def tally(installed: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(installed))
    reload_plugins()
    yield
    monkeypatch.undo()
    for module in [m for m in sys.modules if m.startswith("nspec_tally")]:
        del sys.modules[module]
    reload_plugins()


def spec_text(base_url: str) -> str:
    text = (EXAMPLE / "specs" / "tally.yaml").read_text(encoding="utf-8")
    return text.replace(
        "{id: openai/gpt-4.1-mini, mode: batch}", f'{{id: openai/gpt-4.1-mini, mode: batch, base_url: "{base_url}"}}'
    )


@pytest.mark.usefixtures("tally", "api_keys")
def test_the_worked_plugin_runs_end_to_end(cli, spec_file, tmp_path, emulator):
    emu = emulator()
    name = spec_file(spec_text(emu.openai_base_url))
    compiled = cli("compile", name, "-o", str(tmp_path / "out"))
    assert compiled.code == 0, compiled.err
    run = Path(compiled.out.strip().splitlines()[-1])
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    assert len(cells) == 12  # 3 lengths x 2 trials x 2 kinds of goods
    assert all(
        c["question"].startswith("How many crates of ") and c["data"]["total"] == int(c["expected"][0]) for c in cells
    )
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["task"]["view"]["table"] == {"name": "tally", "title": "Tally", "axis": "goods"}

    # The emulator answers each cell with its expected count, a seeded share of them wrong.
    config = Responder(kind="cells", run=str(run), degrade=Degrade(miss_rate=0.3))
    emu.emulation.responder = make_responder(config, 0, None)
    result = cli("run", name, "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err

    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    assert {s["scorers"][0]["scorer"] for s in scores} == {"count_error"}
    passed = sum(s["verdict"] == "pass" for s in scores)
    assert 0 < passed < len(scores)
    summary = list(csv.DictReader((run / "report" / "summary.csv").read_text().splitlines()))
    assert {json.loads(r["axes"])["goods"] for r in summary} == {2, 5}
    page = (run / "report" / "index.html").read_text(encoding="utf-8")
    assert "within 10%" in page and "Tally" in page  # its metric's label, its headline table's title
    assert "ledger lines" in page and "true total" in page  # its cells' details
    assert "Depth (%)" not in page
    assert (run / "report" / "tally.md").is_file()


@pytest.mark.usefixtures("tally")
def test_its_scorer_options_are_checked_where_the_spec_writes_them(cli, spec_file):
    name = spec_file(spec_text("http://127.0.0.1:9").replace("tolerance: 0", "tolerance: -1"))
    result = cli("validate", name)
    assert result.code == 2
    assert "spec.yaml:15:30: scoring[0].count_error.tolerance: must be at least 0 (got -1)" in result.err
