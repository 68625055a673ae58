"""The judge stage: verdict parsing, votes, judge request files, and judges through the emulator."""

import json
from pathlib import Path

import pytest
from anthropic.types.messages.batch_create_params import Request as AnthropicBatchRequest
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

from nspec.runners.judging import combine, judge_key, judge_prompt, parse_vote
from tests.test_compile import check_typed_dict
from tests.test_runners import batches_on, compile_for

pytestmark = pytest.mark.usefixtures("api_keys")


@pytest.mark.parametrize(
    "reply, vote",
    [
        ("aaa", "pass"),
        ("AAA.", "pass"),
        ("The verdict: aaa", "pass"),
        ("bbb", "fail"),
        ("aaa bbb", "fail"),  # both: fail
        ("", "fail"),
        ("Yes, correct.", "fail"),  # neither: fail
        ("No", "fail"),  # a bare "No" is not a verdict token
    ],
)
def test_pass_fail_tokens(reply, vote):
    assert parse_vote("pass-fail", reply, None)[0] == vote


@pytest.mark.parametrize(
    "reply, vote, detail",
    [
        ("Score: 7/10", "pass", "score 7"),
        ("8", "pass", "score 8"),
        ("10/10", "pass", "score 10"),
        ("[[3]]", "fail", "score 3"),
        ("I'd give it 6 out of 10.", "fail", "score 6"),
        ("11", "fail", "no score"),
        ("excellent", "fail", "no score"),
    ],
)
def test_score_10(reply, vote, detail):
    assert parse_vote("score-10", reply, 7) == (vote, detail)


def test_vote_rules():
    assert combine(["pass", "pass", "fail"], "majority") == "pass"
    assert combine(["pass", "fail"], "majority") == "fail"  # a tie fails, as in NIAN
    assert combine(["pass", "pass", "fail"], "unanimous") == "fail"
    assert combine(["fail", "fail", "pass"], "any") == "pass"
    assert combine([], "unanimous") == "fail"


def test_judge_prompt_shows_question_expected_alternates_and_answer():
    _, user = judge_prompt(
        "pass-fail", "What is the code?", ["1234567"], ["1,234,567"], "It is 1234567.", negative=False
    )
    assert "Question: What is the code?" in user and "Expected answer: 1234567" in user
    assert "- 1,234,567" in user and "<answer_to_grade>\nIt is 1234567.\n</answer_to_grade>" in user
    assert user.endswith("Reply with aaa or bbb only.")
    _, negative = judge_prompt("score-10", "What is the code?", [], [], "UNANSWERABLE", negative=True)
    assert "Expected answer: none." in negative and negative.endswith("Reply with the score only.")


def run_directory(result):
    """The run directory `nspec run` reports."""
    line = next(ln for ln in result.out.splitlines() if ln.startswith("run directory: "))
    return Path(line.removeprefix("run directory: "))


JUDGES = """
scoring:
  - exact: "{{answer}}"
  - judge:
      models:
        - {{id: openai/gpt-4.1-mini, mode: {mode}, base_url: "{openai}"}}
        - {{id: anthropic/claude-haiku-4-5, mode: {mode}, base_url: "{anthropic}"}}
        - {{id: openai/gpt-4o-mini, mode: {mode}, base_url: "{openai}"}}
      rubric: {rubric}
      {extra}
"""


def judged_run(tmp_path, emu, mode="batch", rubric="pass-fail", extra=""):
    run = compile_for(tmp_path, emu, modes=("live",))
    spec = tmp_path / "spec.yaml"
    text = spec.read_text().replace(
        "run: {",
        JUDGES.format(
            mode=mode, rubric=rubric, extra=extra, openai=emu.openai_base_url, anthropic=emu.anthropic_base_url
        )
        + "run: {",
    )
    spec.write_text(text)
    return run, spec


def test_judges_decide_what_scorers_leave_undecided(emulator, tmp_path, cli):
    emu = emulator()
    _, spec = judged_run(tmp_path, emu)
    result = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    run = run_directory(result)
    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    # The oracle answers with a sentence, so `exact` decides nothing: every cell goes to three judges.
    assert all(s["scorers"][0]["verdict"] == "undecided" for s in scores if not s["negative"])
    needle_cells = [s for s in scores if not s["negative"]]
    assert all(len(s["votes"]) == 3 for s in needle_cells)
    assert all(s["verdict"] == "pass" and s["reason"].startswith("judges: 3 of 3 pass") for s in needle_cells)
    negatives = [s for s in scores if s["negative"]]  # decided by the negative-control rule: no judge needed
    assert negatives and all(s["votes"] == [] and s["verdict"] == "pass" for s in negatives)
    assert batches_on(emu) == (2, 1)  # two OpenAI judges, one Anthropic judge, each one batch
    # Judge request files are exactly the providers' formats.
    for shard in sorted((run / "judge" / "requests").iterdir()):
        for line in shard.read_text().splitlines():
            request = json.loads(line)
            if "params" in request:
                check_typed_dict(AnthropicBatchRequest, request)
            else:
                check_typed_dict(CompletionCreateParamsNonStreaming, request["body"])
                keys = {judge_key("openai/gpt-4.1-mini", "pass-fail"), judge_key("openai/gpt-4o-mini", "pass-fail")}
                assert request["custom_id"].rsplit("-", 1)[1] in keys
    again = cli("score", str(run))  # grading again sends nothing new
    assert again.code == 0 and batches_on(emu) == (2, 1)


def test_judges_when_always_and_score_10_live(emulator, tmp_path, cli):
    emu = emulator()
    _, spec = judged_run(tmp_path, emu, mode="live", rubric="score-10", extra="threshold: 7\n      when: always")
    spec.write_text(spec.read_text().replace('- exact: "{answer}"', "- number: true"))
    result = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    run = run_directory(result)
    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    needle_cells = [s for s in scores if not s["negative"]]
    assert all(s["scorers"][0]["verdict"] == "pass" for s in needle_cells)  # the number scorer decided...
    assert all(s["judge_verdict"] == "pass" and s["votes"][0]["detail"] == "score 10" for s in needle_cells)
    assert batches_on(emu) == (0, 0)  # ...and judges graded every cell anyway (calibration), live


def test_rescore_sends_only_new_judge_requests(emulator, tmp_path, cli):
    emu = emulator()
    _, spec = judged_run(tmp_path, emu)
    run = run_directory(cli("run", str(spec), "--wait", "-o", str(tmp_path / "out")))
    assert batches_on(emu) == (2, 1)
    # Swap the third judge for another: the two kept judges' verdicts are reused, only the newcomer is asked.
    changed = tmp_path / "changed.yaml"
    changed.write_text(spec.read_text().replace("openai/gpt-4o-mini", "openai/gpt-4.1"))
    result = cli("rescore", str(run), "--spec", str(changed), "--wait")
    assert result.code == 0, result.err
    assert batches_on(emu) == (3, 1)  # exactly one new batch, for the new judge
    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    judged = [s for s in scores if s["votes"]]
    assert judged and all(
        sorted(v["judge"] for v in s["votes"])
        == ["anthropic/claude-haiku-4-5", "openai/gpt-4.1", "openai/gpt-4.1-mini"]
        for s in judged
    )
    assert cli("rescore", str(run), "--spec", str(changed), "--wait").code == 0
    assert batches_on(emu) == (3, 1)  # nothing new to ask
    other = tmp_path / "other.yaml"
    other.write_text(spec.read_text().replace("trials: 1", "trials: 2"))
    refused = cli("rescore", str(run), "--spec", str(other))
    assert refused.code == 2 and "differs from the run's in more than scoring (grid)" in refused.err


@pytest.mark.parametrize(
    "rubric, reply, vote",
    [
        ("pass-fail", '{"verdict": "aaa"}', "pass"),
        ("pass-fail", '{"verdict": "bbb"}', "fail"),
        ("score-10", '{"score": 8}', "pass"),
        ("score-10", '{"score": 2}', "fail"),
        ("pass-fail", '{"broken": ', "fail"),  # not JSON after all: read as text, no verdict token
    ],
)
def test_structured_replies(rubric, reply, vote):
    assert parse_vote(rubric, reply, 7)[0] == vote


def test_openai_judges_ask_for_structured_output(emulator, tmp_path, cli):
    emu = emulator()
    _, spec = judged_run(tmp_path, emu)
    run = run_directory(cli("run", str(spec), "--wait", "-o", str(tmp_path / "out")))
    openai_lines = [
        json.loads(line)
        for shard in sorted((run / "judge" / "requests").glob("openai-*"))
        for line in shard.read_text().splitlines()
    ]
    assert openai_lines and all(line["body"]["response_format"]["type"] == "json_schema" for line in openai_lines)
    replies = [json.loads(line)["text"] for line in (run / "judge" / "results.jsonl").read_text().splitlines()]
    assert '{"verdict": "aaa"}' in replies and "aaa" in replies  # OpenAI judges answer in JSON, Anthropic in text
