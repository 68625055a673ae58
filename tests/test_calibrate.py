"""`nspec calibrate`: Claude's and Gemini's counts asked of the emulator's count-tokens endpoints (which count with
cl100k_base, not the o200k_base nspec's proxy uses, so an estimate cannot pass for them), written beside the spec,
and a compile that fits and counts those models' cells in them — equal, cell by cell, to what the provider then
reports as the input tokens of the run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nspec.runners.calibrate import calibrate
from nspec.runners.emulator.generation import anthropic_prompt_tokens, google_prompt_tokens
from tests.test_runners import results

pytestmark = pytest.mark.usefixtures("api_keys", "gemini_key")


@pytest.fixture
def gemini_key(monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")


SPEC = """\
nspec: 1
name: calibrated
seed: 3
haystack: {{corpus: austen, vary: none}}
needles:
  - text: "{needle}"
    question: "{question}"
    answer: "{answer}"
{vars}grid: {{context_lengths: {lengths}, depths: {depths}, trials: 1, negative_controls: true}}
prompt: {{system: "You answer from the document.", user: "{{haystack}}\\n\\n{{question}}", reserve_tokens: 40{prefill}}}
models:
{models}
run: {{poll: {{min_seconds: 0.01, max_seconds: 0.05}}}}
"""
DRAWN = (
    "The special magic {city} number is: {number}.",
    "What is the special magic {city} number?",
    "{number}",
    "    vars: {city: {choice: cities}, number: {digits: 7}}\n",
)
FIXED = ("The special magic number is: 4815162.", "What is the special magic number?", "4815162", "")


def write_spec(folder: Path, models: str, lengths="[500, 1500, 3000]", depths="[0, 50, 100]", needle=DRAWN, prefill=""):
    spec = folder / "spec.yaml"
    spec.write_text(spec_text(models, lengths, depths, needle, prefill))
    return spec


def spec_text(models, lengths="[500, 1500, 3000]", depths="[0, 50, 100]", needle=DRAWN, prefill=""):
    text, question, answer, variables = needle
    return SPEC.format(
        needle=text,
        question=question,
        answer=answer,
        vars=variables,
        lengths=lengths,
        depths=depths,
        models=models,
        prefill=prefill,
    )


def claude(emu, name="claude-haiku-4-5"):
    return f'  - {{id: anthropic/{name}, base_url: "{emu.anthropic_base_url}"}}'


def gemini(emu):
    return f'  - {{id: google/gemini-2.5-flash, base_url: "{emu.google_base_url}"}}'


def cells_and_lines(run: Path) -> list[tuple[dict, dict]]:
    lines = {}
    for shard in (run / "answers" / "requests").iterdir():
        for raw in shard.read_text().splitlines():
            line = json.loads(raw)
            lines[line.get("custom_id", line.get("key"))] = line
    cells = [json.loads(raw) for raw in (run / "cells.jsonl").read_text().splitlines()]
    return [(c, lines[c["cell_id"]]) for c in cells]


def provider_count(line: dict) -> int:
    """What the emulator counts for a request line, as its count-tokens endpoint and its usage do."""
    return anthropic_prompt_tokens(line["params"]) if "params" in line else google_prompt_tokens(line["request"])


@pytest.mark.parametrize("lane", ["anthropic", "google"])
def test_calibrated_counts_are_the_provider_s_and_the_run_bills_them(emulator, tmp_path, cli, lane):
    emu = emulator()
    prefill = ', prefill: "The number is"' if lane == "anthropic" else ""
    spec = write_spec(tmp_path, claude(emu) if lane == "anthropic" else gemini(emu), prefill=prefill)
    estimated = cli("compile", str(spec), "-o", str(tmp_path / "before"))
    assert estimated.code == 0, estimated.err
    before = cells_and_lines(Path(estimated.out.strip()))
    assert not any(c["tokens_exact"] for c, _ in before)
    assert any(c["context_length"]["prompt"] != provider_count(line) for c, line in before)  # the proxy is off

    calibrated = cli("calibrate", str(spec))
    assert calibrated.code == 0, calibrated.err
    assert "composed counts agree with whole-cell counts on 4 cells" in calibrated.out
    counts = json.loads((tmp_path / "spec.counts.json").read_text())
    (entry,) = counts["models"].values()
    assert entry["composition"] == "verified" and entry["counted_by"] == f"{lane} count_tokens"

    compiled = cli("compile", str(spec), "-o", str(tmp_path / "out"))
    assert compiled.code == 0, compiled.err
    run = Path(compiled.out.strip())
    after = cells_and_lines(run)
    for cell, line in after:
        length = cell["context_length"]
        assert cell["tokens_exact"] and length["counted_by"] == f"{lane} count_tokens" and "margin" not in length
        assert length["prompt"] == provider_count(line), cell["cell_id"]
        # Fitted in the provider's tokens: never over the length, short of it by less than a needle and a cut.
        assert length["target"] - 40 <= length["actual"] <= length["target"], length
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["models"][0]["tokenizer"] == {"name": f"{lane} count_tokens", "exact": True, "margin": 0.0}
    assert not [f for f in manifest["fallbacks"] if f["kind"] == "estimated_tokens"]
    assert "counts" in {f["role"] for f in manifest["provenance"]["files"]}

    ran = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 0, ran.err
    billed = {r["cell_id"]: r["usage"]["input_tokens"] for r in results(run)}
    assert billed == {c["cell_id"]: c["context_length"]["prompt"] for c, _ in after}


def test_a_15_by_15_grid_needs_far_fewer_counts_than_cells_and_a_second_calibrate_none(emulator, tmp_path, cli):
    emu = emulator()
    lengths = str([*range(400, 3200, 200), 6400])
    depths = str([round(100 * i / 14, 2) for i in range(15)])
    spec = write_spec(tmp_path, claude(emu), lengths=lengths, depths=depths, needle=FIXED)
    asked = emu.emulation.statuses[200]
    first = calibrate(str(spec))
    (model,) = first.models
    assert model.cells == 15 * 16 and model.composition == "verified"
    assert model.asked < model.cells / 4, model  # the haystack's counts are shared by the cells of a length
    assert emu.emulation.statuses[200] - asked == model.asked
    written = (tmp_path / "spec.counts.json").read_bytes()
    again = calibrate(str(spec))
    assert again.models[0].asked == 0 and again.models[0].composition == "verified"  # all reused
    assert (tmp_path / "spec.counts.json").read_bytes() == written
    a = cli("compile", str(spec), "-o", str(tmp_path / "a"))
    b = cli("compile", str(spec), "-o", str(tmp_path / "b"))
    assert Path(a.out.strip()).name == Path(b.out.strip()).name  # the counts are part of the run's identity


def test_without_counts_or_with_stale_ones_the_estimate_is_said(emulator, tmp_path, cli):
    emu = emulator()
    spec = write_spec(tmp_path, claude(emu))
    plan = cli("plan", str(spec))
    assert plan.code == 0 and "`nspec calibrate SPEC` counts them exactly" in " ".join(plan.out.split())
    assert cli("calibrate", str(spec)).code == 0
    spec.write_text(spec.read_text().replace("[500, 1500, 3000]", "[500, 1500, 2500]"))
    stale = cli("compile", str(spec), "-o", str(tmp_path / "out"))
    assert stale.code == 0, stale.err
    cells = [c for c, _ in cells_and_lines(Path(stale.out.strip()))]
    exact = {c["context_length"]["target"] for c in cells if c["tokens_exact"]}
    assert exact == {500, 1500}  # the new length was never counted: estimated, and said
    manifest = json.loads((Path(stale.out.strip()) / "manifest.json").read_text())
    (note,) = [f for f in manifest["fallbacks"] if f["kind"] == "estimated_tokens"]
    assert note["cells"] == 4 and "run `nspec calibrate SPEC` again" in note["message"]


class CharacterCounter:
    """A count-tokens endpoint whose tokenizer does not cut at words (one token per 5 characters of the body), so
    composed counts are off: calibrate must find it out and count every cell whole."""

    def __init__(self) -> None:
        self.calls = 0

    def count(self, body: dict) -> int:
        self.calls += 1
        return math.ceil(len(json.dumps(body)) / 5)


def test_where_composed_counts_are_wrong_every_cell_is_counted_whole(emulator, tmp_path, cli):
    emu = emulator()
    spec = write_spec(tmp_path, claude(emu))
    counter = CharacterCounter()
    done = calibrate(str(spec), counters={"anthropic/claude-haiku-4-5": counter})
    (model,) = done.models
    assert model.composition == "rejected" and model.disagreed
    compiled = cli("compile", str(spec), "-o", str(tmp_path / "out"))
    assert compiled.code == 0, compiled.err
    for cell, line in cells_and_lines(Path(compiled.out.strip())):
        body = {k: line["params"][k] for k in ("model", "system", "messages")}
        assert cell["tokens_exact"] and cell["context_length"]["prompt"] == math.ceil(len(json.dumps(body)) / 5)


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "spec.counts.json:1:2: not JSON ("),
        (
            '{"nspec_counts": 1, "models": {"anthropic/x": {"counted_by": "a", "composition": "maybe", "counts": {}}}}',
            "models.anthropic/x.composition",
        ),
        (
            '{"nspec_counts": 1, "models": {"anthropic/x": {"counted_by": "a", "composition": "verified", '
            '"counts": {"abc": 1}}}}',
            "models.anthropic/x.counts",
        ),
    ],
)
def test_a_bad_counts_file_is_exit_2_located(cli, spec_file, content, message):
    spec = spec_file(spec_text("  - {id: anthropic/claude-haiku-4-5}", lengths="[500]", needle=FIXED))
    Path("spec.counts.json").write_text(content)
    result = cli("plan", spec)
    assert result.code == 2 and message in result.err, result.err


def test_calibrate_needs_the_key_and_skips_models_that_cannot_count(emulator, tmp_path, cli, monkeypatch):
    emu = emulator(api_key="right")
    models = claude(emu) + f'\n  - {{id: openai/gpt-4.1-mini, base_url: "{emu.openai_base_url}"}}'
    spec = write_spec(tmp_path, models, lengths="[500]")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "wrong")
    refused = cli("calibrate", str(spec))
    assert refused.code == 2 and "the key in ANTHROPIC_API_KEY was refused" in refused.err, refused.err
    assert not (tmp_path / "spec.counts.json").exists()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "right")
    done = cli("calibrate", str(spec))
    assert done.code == 0, done.err
    assert "openai/gpt-4.1-mini: skipped: openai has no count-tokens endpoint: its counts stay exact" in done.out
