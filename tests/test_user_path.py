"""The small truths of a newcomer's path: the plan shows model ids whole and says what its numbers are; `nspec run`
ends with the run's table as `nspec report` prints it; `nspec report` given a spec or a folder of runs says what to
do; the README's figures are the code's."""

from __future__ import annotations

import json
import re

from nspec.runners import rehearsal
from tests.conftest import ROOT, SPECS


def test_plan_shows_model_ids_whole_in_a_narrow_terminal_and_names_the_family(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = cli("plan", str(SPECS / "graphwalks.yaml"))
    assert result.code == 0, result.err
    assert "openai/gpt-4.1-mini" in result.out and "anthropic/claude-haiku-4-5" in result.out
    assert "task: the graphwalks family, version 1" in result.out


def test_run_ends_with_the_table_report_prints_and_report_finds_runs_in_a_folder(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(rehearsal, "PORT", 9)  # nothing listens there: an emulator of the test's own
    out = tmp_path / "out"
    ran = cli("run", str(SPECS / "mrcr.yaml"), "--emulator", "--wait", "-o", str(out))
    assert ran.code == 0, ran.err
    table = ran.out[ran.out.index("|Model|") : ran.out.index("report: ")]
    assert table.splitlines()[0] == "|Model|Cells|Pass rate (95% CI)|Similarity (%)|Effective length (95% CI)|"
    folder = out / "rehearsals" / "mrcr"
    (run,) = folder.iterdir()
    listed = cli("report", str(folder))
    assert listed.code == 2 and listed.err.split("\n")[1].strip() == str(run)
    latest = cli("report", str(folder), "--latest")
    assert latest.code == 0 and table in latest.out
    spec = cli("report", str(SPECS / "mrcr.yaml"))
    assert spec.code == 2 and "is a spec, not a run directory: `nspec run " in spec.err


def test_the_readme_s_figures_are_the_code_s(cli):
    from nspec.runners.providers.local import model_file

    readme = (ROOT / "README.md").read_text()
    size = f"{model_file('gemma-3-270m').stat().st_size / 1e6:,.0f} MB"  # as the run prints it loading the model
    assert re.findall(r"gemma-3-270m, (\d+ MB)\s+from PyPI", readme) == [size]
    assert re.findall(r"loading gemma-3-270m \((\d+ MB)\)", readme) == [size]
    plan = json.loads(cli("plan", str(SPECS / "quickstart.yaml"), "--json").out)
    (model,) = plan["models"]
    assert f"answers: {model['requests']} local requests to send" in readme
    spec = (SPECS / "quickstart.yaml").read_text()
    lengths = len(re.search(r"context_lengths: \[([^]]*)\]", spec).group(1).split(","))
    depths = len(re.search(r"depths: \[([^]]*)\]", spec).group(1).split(","))
    assert model["cells"] == lengths * depths + lengths  # a negative control per length
    prose = " ".join(readme.split())
    assert f"`{lengths * depths} pass` are the " in prose and f"`{lengths} fail` are the negative controls" in prose
    assert f"scores: {lengths} fail, {lengths * depths} pass" in readme


def test_a_misspelt_model_is_refused_before_anything_is_sent_at_its_line(cli, spec_file, emulator, api_keys):
    emu = emulator()
    text = (SPECS / "graphwalks.yaml").read_text()
    text = text.replace(
        "- id: openai/gpt-4.1-mini", f'- id: openai/gpt-4.1-mnii\n    base_url: "{emu.openai_base_url}"'
    )
    text = text.replace(
        "- id: anthropic/claude-haiku-4-5",
        f'- id: anthropic/claude-haiku-4-6\n    base_url: "{emu.anthropic_base_url}"',
    )
    spec = spec_file(text)
    result = cli("run", spec, "--wait")
    assert result.code == 2
    said = result.err.split("\n")
    assert said[0].startswith("spec.yaml:21:9: models[0].id: 'gpt-4.1-mnii' is not among the models openai serves")
    assert said[0].endswith("did you mean openai/gpt-4.1-mini?")
    assert said[1].startswith("spec.yaml:24:9: models[1].id: 'claude-haiku-4-6' is not among the models anthropic")
    assert not emu.emulation.store.openai_batches and not emu.emulation.answered  # nothing sent
