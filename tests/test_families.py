"""Task families behind one seam: a family of one's own, installed as a package, compiles through the same code path
as needles — Sized contexts built at the largest size that fits, Fixed prompts placed at the smallest length that
fits — and runs, is scored and reported end to end."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from nspec.compiler.providers.contract import as_sent
from nspec.compiler.providers.registry import provider
from nspec.compiler.run_writer import compile_run
from nspec.compiler.tasks import Setup, Sized, Slot, registry
from nspec.prompt import Prompt, Turn
from nspec.runners.emulator.config import Degrade, Responder
from nspec.runners.emulator.responders import make_responder
from tests.contract import assert_run_valid
from tests.families import families  # noqa: F401 - a fixture

pytestmark = pytest.mark.usefixtures("families")

COUNTING = {
    "nspec": 1,
    "name": "counting",
    "seed": 3,
    "task": {"name": "counting", "params": {"word": "fig"}},
    "grid": {"context_lengths": [300, 700], "trials": 1},
    "prompt": {"system": "Answer with a number.", "reserve_tokens": 20},
    "models": [{"id": "openai/gpt-4.1-mini"}, {"id": "anthropic/claude-haiku-4-5"}],
}


def compiled(spec, tmp_path):
    run = compile_run(spec, ".", tmp_path / "out", {"file": "spec.yaml"}).path
    assert_run_valid(run)
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    requests = {}
    for shard in sorted((run / "answers" / "requests").iterdir()):
        for line in shard.read_text().splitlines():
            request = json.loads(line)
            requests[request["custom_id"]] = request
    return run, cells, requests


def tokens(model_id, system, built):
    """The request's tokens as the model counts them (o200k, OpenAI's chat framing) once the prefix is placed."""
    api = provider(model_id.split("/")[0])
    entry = {"id": model_id}
    prompt = as_sent(api, entry, Prompt(system, (Turn("user", built.text),), built.answer_prefix))
    texts = prompt.texts()
    tokenizer = api.tokenizer(model_id.split("/")[1], None)
    return tokenizer.scale(
        tokenizer.framing(len(texts), prompt.prefill is not None) + sum(map(tokenizer.own_count, texts))
    )


def test_a_sized_context_is_the_largest_that_fits(tmp_path):
    run, cells, requests = compiled(COUNTING, tmp_path)
    assert len(cells) == 4  # two models, two lengths
    task = registry.family("counting").task(Setup(COUNTING, {"word": "fig"}, None, 3))
    for cell in cells:
        length = cell["context_length"]
        assert length["prompt"] + 20 == length["actual"] <= length["target"]
        size = cell["size"]
        assert size % 10 == 0 and size >= 10
        assert cell["expected"] == [str(cell["data"]["count"])] and cell["data"]["words"] == size
        (draft,) = task.drafts(Slot(None, length["target"], 0, 3))
        assert isinstance(draft.context, Sized)
        built = draft.context.build(size)
        assert tokens(cell["model_id"], "Answer with a number.", built) == length["prompt"]
        bigger = draft.context.build(size + 10)
        assert (
            tokens(cell["model_id"], "Answer with a number.", bigger) + 20 > length["target"]
        )  # the next step overflows
    lines = {c["model"]: requests[c["cell_id"]] for c in cells if c["context_length"]["target"] == 300}
    # OpenAI's chat API continues no prefill: the answer prefix ends the user turn; Claude Haiku 4.5 continues it.
    assert lines["openai/gpt-4.1-mini"]["body"]["messages"][-1]["content"].endswith("The number of times is")
    assert lines["anthropic/claude-haiku-4-5"]["params"]["messages"][-1] == {
        "role": "assistant",
        "content": " The number of times is",
    }
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["task"] == {
        "name": "counting",
        "version": "1",
        "params": {"word": "fig"},
        "axes": [],
        "view": {"axes": [], "details": [], "table": None},
    }
    assert manifest["haystack"] == {"kind": "none"}


def test_fixed_prompts_go_to_the_smallest_length_they_fit(tmp_path):
    short = ["What is two and two?"]
    long = ["Remember the code word: heron. " * 40, "I will remember it.", "What was the code word?"]
    huge = ["word " * 2000]
    spec = {
        **COUNTING,
        "name": "replay",
        "task": {
            "name": "replay",
            "params": {
                "rows": [
                    {"id": "short", "turns": short, "answer": "four"},
                    {"id": "long", "turns": long, "answer": "heron"},
                    {"id": "huge", "turns": huge, "answer": "word"},
                ]
            },
        },
        "grid": {"context_lengths": [700, 300], "trials": 1},
        "models": [{"id": "openai/gpt-4.1-mini"}],
    }
    run, cells, requests = compiled(spec, tmp_path)
    placed = {c["axes"]["row"]: c for c in cells}
    assert sorted(placed) == ["long", "short"]  # the huge row fits no length
    assert placed["short"]["context_length"]["target"] == 300 and placed["long"]["context_length"]["target"] == 700
    messages = requests[placed["long"]["cell_id"]]["body"]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    manifest = json.loads((run / "manifest.json").read_text())
    (unplaced,) = [f for f in manifest["fallbacks"] if f["kind"] == "unplaced"]
    assert unplaced["cells"] == 1


SPEC = """\
nspec: 1
name: count
seed: 3
task: {name: counting, params: {word: fig}}
grid: {context_lengths: [300, 700], params: {vocabulary: [3, 5]}}
prompt: {system: "Answer with a number.", reserve_tokens: 20}
models: [{id: openai/gpt-4.1-mini}]
"""


def test_a_spec_names_a_family_and_sweeps_its_params(cli, spec_file, tmp_path):
    name = spec_file(SPEC)
    assert cli("validate", name).code == 0
    result = cli("compile", name, "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    (run,) = (tmp_path / "out" / "count").iterdir()
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    assert sorted((c["context_length"]["target"], c["axes"]["vocabulary"]) for c in cells) == [
        (300, 3),
        (300, 5),
        (700, 3),
        (700, 5),
    ]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["task"]["axes"] == ["vocabulary"]


@pytest.mark.parametrize(
    "change, error",
    [
        (
            ("name: counting", "name: countin"),
            "spec.yaml:4:14: task.name: unknown task family 'countin': the installed task families are context-rot, "
            "counting, graphwalks, mrcr, needle, nolima, replay, ruler, stack",
        ),
        (("params: {word: fig}", "params: {wrd: fig}"), "spec.yaml:4:33: task.params.wrd: unknown key 'wrd'"),
        (("params: {word: fig}", "params: {word: cherry}"), "spec.yaml:4:39: task.params.word: must be one of:"),
        (
            ("params: {vocabulary: [3, 5]}", "params: {size: [3, 5]}"),
            "spec.yaml:5:46: grid.params.size: unknown parameter 'size' of the counting task family; its parameters "
            "are vocabulary, word",
        ),
        (
            ("params: {vocabulary: [3, 5]}", "params: {vocabulary: [3, 50]}"),
            "spec.yaml:5:62: grid.params.vocabulary[1]: must be at most 8 (got 50)",
        ),
        (
            ("task: {name", "haystack: {corpus: austen}\ntask: {name"),
            "spec.yaml:4:1: haystack: `haystack` does not apply to the counting task family (it reads no haystack)",
        ),
        (
            ('prompt: {system: "Answer with a number."', 'prompt: {user: "{question}"'),
            "the counting task family writes the user turn and its answer prefix",
        ),
    ],
)
def test_a_wrong_family_or_parameter_is_located_in_validate_plan_and_compile(cli, spec_file, change, error):
    name = spec_file(SPEC.replace(*change))
    for command in (["validate"], ["plan"], ["compile", "-o", "out"]):
        result = cli(*command, name)
        assert result.code == 2 and error in result.err, (command, result.err)


def test_needles_still_need_a_haystack_depths_and_a_user_template(cli, spec_file):
    from tests.conftest import BASE

    spec = BASE.replace("haystack: {corpus: austen}\n", "").replace(", depths: [50]", "")
    result = cli("validate", spec_file(spec.replace('prompt: {user: "{haystack} {question}"}', "prompt: {}")))
    assert result.code == 2
    assert "spec.yaml:1:1: missing required key 'haystack' at the top of the spec" in result.err
    assert "grid: missing required key 'depths' in `grid`" in result.err
    assert "prompt: missing required key 'user' in `prompt`" in result.err


def test_a_family_of_one_s_own_runs_is_scored_and_reported_end_to_end(cli, spec_file, tmp_path, emulator, api_keys):
    """Compile, answer from the run's own cells (a seeded share missed), score with the family's default scorer
    (RULER's string_match_all) and report RULER's table: the mean score per swept value and length, and the
    effective length."""
    emu = emulator()
    spec = SPEC.replace(
        "models: [{id: openai/gpt-4.1-mini}]",
        f'models: [{{id: openai/gpt-4.1-mini, base_url: "{emu.openai_base_url}", mode: live}}]\n'
        "report: {effective_length_threshold: 0.5}",
    ).replace("params: {vocabulary: [3, 5]}}", "params: {vocabulary: [3, 5]}, trials: 4}")
    name = spec_file(spec)
    compiled_run = cli("compile", name, "-o", str(tmp_path / "out"))
    assert compiled_run.code == 0, compiled_run.err
    run = Path(compiled_run.out.strip().splitlines()[-1])
    config = Responder(kind="cells", run=str(run), degrade=Degrade(miss_rate=0.3))
    emu.emulation.responder = make_responder(config, 0, None)
    result = cli("run", name, "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 16 and {s["scorers"][0]["scorer"] for s in scores} == {"string_match_all"}
    passed = sum(s["verdict"] == "pass" for s in scores)
    assert 0 < passed < 16  # the cells responder gives the expected answers, less the seeded misses
    summary = list(csv.DictReader((run / "report" / "summary.csv").read_text().splitlines()))
    by_point = {(r["context_length"], json.loads(r["axes"])["vocabulary"]): r for r in summary}
    assert sorted(by_point) == [("300", 3), ("300", 5), ("700", 3), ("700", 5)]
    assert sum(round(float(r["score"]) * int(r["n"])) for r in summary) == passed
    page = (run / "report" / "index.html").read_text()
    assert "by vocabulary: effective length" in page and "<th>Avg.</th>" in page
