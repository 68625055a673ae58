"""The judge stage: verdict parsing, votes, judge request files, and judges through the emulator."""

import json
from pathlib import Path

import pytest
from anthropic.types.messages.batch_create_params import Request as AnthropicBatchRequest
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

from nspec.compiler.judge_prompts import PRESETS, Graded
from nspec.runners.emulator.config import Faults, JudgeFaults, Responder
from nspec.runners.grading.judging import Grading, Vote, combine, parse_vote, quorum
from nspec.runners.report.charts import charts
from nspec.runners.report.data import collect
from nspec.runners.report.page import grading_rows
from nspec.runners.run_store import Run
from tests.contract import assert_run_valid
from tests.test_compile import check_typed_dict
from tests.test_runners import batches_on, compile_for

pytestmark = pytest.mark.usefixtures("api_keys")


@pytest.mark.parametrize(
    "reply, vote, detail",
    [
        ("aaa", "pass", "aaa"),
        ("AAA.", "pass", "aaa"),
        ("The verdict: aaa", "pass", "aaa"),
        ("bbb", "fail", "bbb"),
        ("aaa bbb", None, "no verdict: both verdict tokens"),  # not a vote, never a fail
        ("", None, "no verdict: no verdict token"),
        ("Yes, correct.", None, "no verdict: no verdict token"),
        ("No", None, "no verdict: no verdict token"),  # a bare "No" is not a verdict token
        ("I'm sorry, but I can't help with grading this.", None, "no verdict: the judge refused"),
    ],
)
def test_pass_fail_tokens(reply, vote, detail):
    assert parse_vote("pass-fail", reply, None) == Vote(vote, detail)


@pytest.mark.parametrize(
    "reply, vote, detail",
    [
        ("Score: 7/10", "pass", "score 7"),
        ("8", "pass", "score 8"),
        ("10/10", "pass", "score 10"),
        ("[[3]]", "fail", "score 3"),
        ("I'd give it 6 out of 10.", "fail", "score 6"),
        ("11", None, "no verdict: no score 1-10"),
        ("excellent", None, "no verdict: no score 1-10"),
    ],
)
def test_score_10(reply, vote, detail):
    assert (parse_vote("score-10", reply, 7).vote, parse_vote("score-10", reply, 7).detail) == (vote, detail)


def test_quorum_defaults_to_more_than_half_the_panel():
    assert [quorum({}, n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]
    assert quorum({"quorum": 1}, 5) == 1


def test_vote_rules():
    assert combine(["pass", "pass", "fail"], "majority") == "pass"
    assert combine(["pass", "fail"], "majority") == "fail"  # a tie fails, as in NIAN
    assert combine(["pass", "pass", "fail"], "unanimous") == "fail"
    assert combine(["fail", "fail", "pass"], "any") == "pass"
    assert combine([], "unanimous") == "fail"


def test_judge_prompt_shows_question_expected_alternates_and_answer():
    nspec = PRESETS["nspec"]
    graded = Graded("What is the code?", ["1234567"], ["1,234,567"], "It is 1234567.", False, "The code is 1234567.")
    _, user = nspec.messages("pass-fail", graded)
    assert "Question: What is the code?" in user and "Expected answer: 1234567" in user
    assert "<passage>\nThe code is 1234567.\n</passage>" in user  # the judge can tell a quote from an invention
    assert "- 1,234,567" in user and "<answer_to_grade>\nIt is 1234567.\n</answer_to_grade>" in user
    assert user.endswith("Reply with aaa or bbb only.")
    _, negative = nspec.messages("score-10", Graded("What is the code?", [], [], "UNANSWERABLE", True, None))
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


def judged_run(tmp_path, emu, mode="batch", rubric="pass-fail", extra="", judges_on=None):
    """A spec whose model answers live on ``emu`` and whose three judges sit on ``judges_on`` (default: the same)."""
    run = compile_for(tmp_path, emu, modes=("live",))
    spec = tmp_path / "spec.yaml"
    panel = judges_on or emu
    text = spec.read_text().replace(
        "run: {",
        JUDGES.format(
            mode=mode, rubric=rubric, extra=extra, openai=panel.openai_base_url, anthropic=panel.anthropic_base_url
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
    assert all(s["verdict"] == "pass" and s["reason"] == "judges: 3 of 3 votes pass (majority)" for s in needle_cells)
    negatives = [s for s in scores if s["negative"]]  # decided by the negative-control rule: no judge needed
    assert negatives and all(s["votes"] == [] and s["verdict"] == "pass" for s in negatives)
    assert batches_on(emu) == (2, 1)  # two OpenAI judges, one Anthropic judge, each one batch
    assert_run_valid(run)  # judge results and votes meet their schemas too
    # Judge request files are exactly the providers' formats.
    for shard in sorted((run / "judge" / "requests").iterdir()):
        for line in shard.read_text().splitlines():
            request = json.loads(line)
            if "params" in request:
                check_typed_dict(AnthropicBatchRequest, request)
            else:
                check_typed_dict(CompletionCreateParamsNonStreaming, request["body"])
                grading = Grading.of({"rubric": "pass-fail"})
                keys = {grading.key("openai/gpt-4.1-mini"), grading.key("openai/gpt-4o-mini")}
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


def test_score_10_without_a_threshold_gives_scores_and_their_heatmap(emulator, tmp_path, cli):
    """needlehaystack kept the judge's raw score: a score-10 panel without `threshold` scores every cell (1-10, the
    mean of the panel), gives no verdict and no pass rate, and the report draws the mean score by depth and length."""
    emu = emulator()
    _, spec = judged_run(tmp_path, emu, mode="live", rubric="score-10", extra="when: always")
    spec.write_text(spec.read_text().replace('  - exact: "{answer}"\n', ""))
    result = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    run = run_directory(result)
    assert_run_valid(run)
    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    needle_cells = [s for s in scores if not s["negative"]]
    assert needle_cells and all(s["verdict"] == "scored" and s["score"] == s["judge_score"] == 10 for s in needle_cells)
    assert all("judge_verdict" not in s and {v["vote"] for v in s["votes"]} == {"scored"} for s in needle_cells)
    data = collect([Run(run)])
    assert data.metric.name == "judge_score" and not data.heat and not data.lengths
    for label, rows in data.score_heat.items():
        assert rows and all(r["score"] == 10 and r["text"].startswith("10.0 (n=") for r in rows), label
        assert data.model_scores[label] == 10 and data.tallies[label].scored == len(rows)
    for row in grading_rows(data):  # no scorer: every needle cell went to the judges, controls to their rule
        assert row["decided"].startswith(f"{sum(s['negative'] for s in scores) // len(data.models)} of")
        assert row["rules"].startswith("negative.")
    (name, _, chart), *_ = charts(data, ("heatmap",))
    assert name.startswith("heatmap-") and chart.to_dict()["layer"][0]["encoding"]["color"]["field"] == "score"


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
        ("pass-fail", '{"broken": ', None),  # not JSON after all: read as text, no verdict token
        ("pass-fail", '{"verdict": "', None),  # cut off inside the JSON
        ("score-10", '{"score": ', None),
    ],
)
def test_structured_replies(rubric, reply, vote):
    assert parse_vote(rubric, reply, 7).vote == vote


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


# -- judges that fail: never a vote, asked again, and a quorum for a verdict -----------------------------------------


def scores_of(run):
    return [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]


def test_a_reply_without_a_verdict_is_asked_again(emulator, tmp_path, cli):
    answers, panel = emulator(), emulator(responder=Responder(judge=JudgeFaults(unreadable_first=1)))
    _, spec = judged_run(tmp_path, answers, mode="live", judges_on=panel)
    result = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    judged = [s for s in scores_of(run_directory(result)) if s["votes"]]
    assert judged and all(s["verdict"] == "pass" for s in judged)
    assert all(v["attempt"] == 2 and v["vote"] == "pass" for s in judged for v in s["votes"])


def test_refusing_judges_are_not_votes(emulator, tmp_path, cli):
    answers = emulator()
    panel = emulator(responder=Responder(judge=JudgeFaults(refusing_models=["gpt-4o-mini"])))
    _, spec = judged_run(tmp_path, answers, mode="live", judges_on=panel)
    result = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err  # two of three judges are a quorum
    judged = [s for s in scores_of(run_directory(result)) if s["votes"]]
    assert judged and all(s["verdict"] == "pass" and s["reason"].startswith("judges: 2 of 2 votes") for s in judged)
    refused = [v for s in judged for v in s["votes"] if v["judge"] == "openai/gpt-4o-mini"]
    # OpenAI puts a refusal under structured output in `message.refusal`; asked three times (the retry attempts)
    assert all(v["vote"] is None and v["detail"] == "no verdict: the judge refused" for v in refused)
    assert all(v["attempt"] == 3 for v in refused)


def test_without_a_quorum_a_cell_has_no_verdict(emulator, tmp_path, cli):
    answers = emulator()
    broken = JudgeFaults(unreadable_models=["gpt-4.1-mini", "claude-haiku-4-5"])
    panel = emulator(responder=Responder(judge=broken))
    run, spec = judged_run(tmp_path, answers, mode="live", judges_on=panel)
    result = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    run = run_directory(result)
    scores = scores_of(run)
    judged = [s for s in scores if s["votes"]]
    assert result.code == 4
    assert f"{len(judged)} cells without a verdict: too few judges gave one" in result.err
    assert all(s["verdict"] == "undecided" and s["judge_error"] and s["judge_verdict"] is None for s in judged)
    assert all(s["reason"].startswith("judge error: 1 of 3 judges gave a verdict, 2 needed") for s in judged)
    status = json.loads(cli("status", str(run), "--json").out)
    assert status["scores"]["undecided (judge error)"] == len(judged)
    assert "undecided (judge error)" in cli("score", str(run)).out
    # A quorum of one: the single judge that answers decides.
    spec.write_text(spec.read_text().replace("rubric: pass-fail", "rubric: pass-fail\n      quorum: 1"))
    rescored = cli("rescore", str(run), "--spec", str(spec), "--wait")
    assert rescored.code == 0, rescored.err
    assert all(s["verdict"] == "pass" and "judge_error" not in s for s in scores_of(run) if s["votes"])


def test_failed_judge_requests_are_not_votes(emulator, tmp_path, cli):
    from nspec.runners.run_store import Run
    from nspec.runners.session import grade, set_scoring
    from nspec.spec import load_spec

    answers, panel = emulator(), emulator(faults=Faults(server_error_rate=1.0))
    run = compile_for(tmp_path, answers, modes=("live",))
    assert cli("run", str(tmp_path / "spec.yaml"), "-o", str(tmp_path / "out")).code == 0  # answers, no judges yet
    _, spec = judged_run(tmp_path, answers, mode="live", judges_on=panel)
    set_scoring(Run(run), load_spec(str(spec)).data)
    counts, pending = grade(str(run), wait=True, live_backoff=0.0)  # judges answer 500 to every attempt
    judged = [s for s in scores_of(run) if s["votes"]]
    assert pending == 0 and counts["undecided (judge error)"] == len(judged) > 0
    votes = [v for s in judged for v in s["votes"]]
    assert all(v["vote"] is None and v["detail"] == "no verdict: request failed (500)" for v in votes)
    assert "pass" not in counts or counts["pass"] == sum(1 for s in scores_of(run) if s["negative"])
