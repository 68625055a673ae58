"""MRCR: conversations generated to each length with the expected answer recomputed here from the messages sent;
OpenAI's published rows run as data; OpenAI's grade; run end to end against the emulator."""

from __future__ import annotations

import json
import re

import pytest

from nspec.compiler.tasks import Setup, Slot, registry
from nspec.runners import pipeline
from nspec.runners.emulator.config import Degrade, Responder
from nspec.runners.emulator.responders import make_responder
from nspec.runners.grading.grader import grade
from nspec.runners.report.data import collect
from nspec.runners.report.page import score_tables
from nspec.runners.run_store import Run
from tests.test_graphwalks import compiled

SPEC = """\
nspec: 1
name: conversations
seed: 9
task: {name: mrcr, params: {corpus: kjv}}
grid: {context_lengths: [1800, 3600], params: {needles: [2, 4]}}
prompt: {reserve_tokens: 300}
models: [{id: openai/gpt-4.1-mini}, {id: anthropic/claude-haiku-4-5}]
"""


def messages(request):
    body = request.get("body") or request["params"]
    return [(m["role"], m["content"]) for m in body["messages"] if m["role"] != "system"]


def test_conversations_fit_each_length_and_expect_what_the_messages_imply(cli, spec_file, tmp_path):
    _, cells, requests = compiled(cli, spec_file, tmp_path, SPEC)
    assert len(cells) == 8
    sizes = {}
    for cell in cells:
        sent = messages(requests[cell["cell_id"]])
        assert [r for r, _ in sent] == ["user", "assistant"] * (len(sent) // 2) + ["user"]
        final = sent[-1][1]
        prefix, nth, form, topic = re.fullmatch(
            r"Prepend (\w{10}) to the (\d+)(?:st|nd|rd|th) \(1 indexed\) (.+) about (.+)\. "
            r"Do not include any other text in your response\.",
            final,
        ).groups()
        answers = [sent[i + 1][1] for i in range(0, len(sent) - 1, 2) if sent[i][1] == f"Write a {form} about {topic}"]
        assert len(answers) == cell["axes"]["needles"] == cell["data"]["needles"]
        assert cell["expected"] == [prefix + answers[int(nth) - 1]] and cell["data"]["prefix"] == prefix
        length = cell["context_length"]
        assert length["prompt"] + 300 == length["actual"] <= length["target"]
        sizes[(cell["model"], cell["axes"]["needles"], length["target"])] = len(sent)
    for model in ("openai/gpt-4.1-mini", "anthropic/claude-haiku-4-5"):
        assert sizes[(model, 2, 3600)] > 1.8 * sizes[(model, 2, 1800)]  # more exchanges at longer lengths


def test_the_assistant_s_pieces_may_come_from_a_file_of_one_s_own(tmp_path):
    pieces = [f"Piece {i}: " + "word " * 30 for i in range(12)]
    (tmp_path / "mine.txt").write_text("\n\n".join(pieces), encoding="utf-8")
    spec = {"grid": {"context_lengths": [4000]}, "prompt": {"reserve_tokens": 300}}
    setup = Setup(spec, {"pieces": "mine.txt", "needles": 4}, None, 1, str(tmp_path))
    (draft,) = registry.family("mrcr").task(setup).drafts(Slot(None, 4000, 0, 1))
    built = draft.context.build(6)
    answers = [t.text for t in built.history if t.role == "assistant"]
    assert len(answers) == 10 == len(set(answers)) and set(answers) <= {p.strip() for p in pieces}
    assert "pieces_repeat" not in built.data and draft.context.build(9).data["pieces_repeat"]  # 13 of 12: said
    assert setup.files[0]["name"] == "mine.txt"  # read through the spec's folder, and into the run id


def test_sequence_ratio_is_openai_s_grade():
    scoring, data = [{"sequence_ratio": True}], {"prefix": "aYooSG8CQg"}
    expected = ["aYooSG8CQgThe tapir sleeps by the river."]
    same = grade("aYooSG8CQgThe tapir sleeps by the river.", expected=expected, scoring=scoring, data=data)
    assert (same.verdict, same.score) == ("pass", 1.0)
    close = grade("aYooSG8CQgThe tapir sleeps by a river.", expected=expected, scoring=scoring, data=data)
    assert close.verdict == "fail" and 0.9 < close.score < 1.0
    assert grade("The tapir sleeps by the river.", expected=expected, scoring=scoring, data=data).score == 0.0
    lenient = [{"sequence_ratio": {"threshold": 0.9}}]
    assert grade("aYooSG8CQgThe tapir sleeps by a river.", expected=expected, scoring=lenient, data=data).verdict == (
        "pass"
    )


def published_row(turns, answer="PFXthe answer", prefix="PFX"):
    roles = ["user" if i % 2 == 0 else "assistant" for i in range(len(turns))]
    prompt = json.dumps([{"role": r, "content": t} for r, t in zip(roles, turns, strict=True)])
    return {"prompt": prompt, "answer": answer, "random_string_to_prepend": prefix, "n_needles": 2}


DATA_SPEC = SPEC.replace("params: {corpus: kjv}", "params: {data: mrcr.jsonl}").replace(
    ", params: {needles: [2, 4]}", ""
)


def test_published_conversations_are_sent_as_they_are(cli, spec_file, tmp_path):
    turns = ["Write a poem about tapirs", "Tapirs " * 40, "Prepend PFX to the 1st (1 indexed) poem about tapirs."]
    (tmp_path / "mrcr.jsonl").write_text(json.dumps(published_row(turns)) + "\n", encoding="utf-8")
    _, cells, requests = compiled(cli, spec_file, tmp_path, DATA_SPEC)
    for cell in cells:
        assert messages(requests[cell["cell_id"]]) == list(zip(["user", "assistant", "user"], turns, strict=True))
        assert cell["expected"] == ["PFXthe answer"] and cell["data"]["prefix"] == "PFX"
        assert cell["context_length"]["target"] == 1800 and cell["item"] == "row-0"


@pytest.mark.parametrize(
    "row, params, message",
    [
        (published_row(["a", "b"]), "{data: mrcr.jsonl}", "task.params.data: mrcr.jsonl:1: `prompt` must be a list"),
        ({"prompt": "[oops", "answer": "x"}, "{data: mrcr.jsonl}", "must be a JSON list of messages"),
        ({**published_row(["a"]), "answer": 3}, "{data: mrcr.jsonl}", "`answer` and `random_string_to_prepend`"),
        (None, "{data: mrcr.jsonl, needles: 4}", "task.params.needles: `needles` is for generated conversations"),
        (None, "{corpus: paul-graham}", "task.params.corpus: must be one of"),
        (None, "{pieces: mine.txt}", "task.params.pieces: mine.txt: holds 2 pieces; MRCR needs at least 9"),
    ],
)
def test_a_bad_data_file_or_parameter_is_located_in_validate_plan_and_compile(
    cli, spec_file, tmp_path, row, params, message
):
    (tmp_path / "mrcr.jsonl").write_text(json.dumps(row or published_row(["a"])) + "\n", encoding="utf-8")
    (tmp_path / "mine.txt").write_text("one piece\n\nanother piece\n", encoding="utf-8")
    name = spec_file(DATA_SPEC.replace("{data: mrcr.jsonl}", params))
    for command in (["validate"], ["plan"], ["compile", "-o", "out"]):
        result = cli(*command, name)
        assert result.code == 2 and "Traceback" not in result.err, (command, result.err)
        assert "spec.yaml:4:" in result.err and message in result.err, (command, result.err)


def test_a_count_of_needles_that_cannot_fit_the_length_is_located(cli, spec_file):
    name = spec_file(SPEC.replace("[1800, 3600]", "[900, 3600]").replace("[2, 4]", "[2, 8]"))
    for command in (["validate"], ["plan"], ["compile", "-o", "out"]):
        result = cli(*command, name)
        assert result.code == 2, (command, result.err)
        assert "spec.yaml:5:" in result.err and "grid.params.needles" in result.err, (command, result.err)
        assert "8 needles cannot fit a context length of 900" in result.err, (command, result.err)


def test_a_later_sample_too_long_for_its_length_is_refused_located_by_plan_and_compile(cli, spec_file):
    # The first sample fits 2,000 tokens at its smallest size, a later one does not: validate builds the first trial
    # only (docs/writing-specs.md), plan and compile refuse where validate would, at grid.context_lengths.
    tight = (
        SPEC.replace("[1800, 3600]", "[2000]")
        .replace("[2, 4]", "[8]")
        .replace("params: {needles", "trials: 20, params: {needles")
    )
    name = spec_file(
        tight.replace("{id: openai/gpt-4.1-mini}, {id: anthropic/claude-haiku-4-5}", "{id: openai/gpt-4.1-mini}")
    )
    for command in (["plan"], ["compile", "-o", "out"]):
        result = cli(*command, name)
        assert result.code == 2, (command, result.err)
        assert "spec.yaml:5:" in result.err and "grid.context_lengths: cell openai-gpt-4-1-mini-" in result.err
        assert "the mrcr task at its smallest size (1) needs more than 1700 tokens" in result.err, result.err


def test_mrcr_runs_with_conversations_is_scored_by_similarity_and_tabled(cli, spec_file, tmp_path, emulator, api_keys):
    """The conversations go to the emulator over Anthropic's Messages API (turn by turn), answered from the run's
    cells with a seeded share missed, scored by OpenAI's grade and tabled as the report tables it."""
    emu = emulator()
    spec = SPEC.replace(
        "models: [{id: openai/gpt-4.1-mini}, {id: anthropic/claude-haiku-4-5}]",
        f'models: [{{id: anthropic/claude-haiku-4-5, base_url: "{emu.anthropic_base_url}", mode: live}}]',
    ).replace("[1800, 3600]", "[1800], trials: 4")
    run, _, _ = compiled(cli, spec_file, tmp_path, spec)
    emu.emulation.responder = make_responder(
        Responder(kind="cells", run=str(run), degrade=Degrade(miss_rate=0.4)), 0, None
    )
    pipeline.submit(run, live_backoff=0)
    assert not pipeline.collect(run, wait=True, live_backoff=0).pending
    pipeline.score(run)
    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 8 and {s["scorers"][0]["scorer"] for s in scores} == {"sequence_ratio"}
    assert {s["verdict"] for s in scores} == {"pass", "fail"}
    data = collect([Run(run)])
    (table,) = score_tables(data, 0.5)
    assert data.metric.label == "similarity" and [r["value"] for r in table["rows"]] == ["2", "4"]
