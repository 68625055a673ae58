"""Judge prompts: the presets send what the references sent, word for word, and a spec's own prompt is sent filled
in, as the judge request files show after a run against the emulator.

The ground truth here is the references' own text, copied from their source (below, with where each comes from)
and filled by their own rule: string.Template for NIAN, str.format for LangChain's f-string templates."""

import json
import string
from pathlib import Path

import pytest

from nspec.compiler.judge_prompts import NO_ANSWER, PRESETS, Graded
from nspec.compiler.run_writer import plan
from nspec.runners import pipeline
from nspec.runners.grading.judging import Grading, parse_vote
from nspec.spec import load_spec

pytestmark = pytest.mark.usefixtures("api_keys")

# -- needlehaystack: gkamradt/LLMTest_NeedleInAHaystack@7b90d28, needlehaystack/evaluators/openai.py -----------------
CRITERIA = {
    "accuracy": """
                Score 1: The answer is completely unrelated to the reference.
                Score 3: The answer has minor relevance but does not align with the reference.
                Score 5: The answer has moderate relevance but contains inaccuracies.
                Score 7: The answer aligns with the reference but has minor omissions.
                Score 10: The answer is completely accurate and aligns perfectly with the reference.
                Only respond with a numberical score"""
}
# ...and langchain 0.1.9 (pinned by its requirements.txt), langchain/evaluation/scoring/prompt.py and eval_chain.py.
SYSTEM_MESSAGE = "You are a helpful assistant."
CRITERIA_INSTRUCTIONS = "For this evaluation, you should primarily consider the following criteria:\n"
HUMAN_WITH_REFERENCE = "[Instruction]\nPlease act as an impartial judge \
and evaluate the quality of the response provided by an AI \
assistant to the user question displayed below. {criteria}" '[Ground truth]\n{reference}\nBegin your evaluation \
by providing a short explanation. Be as objective as possible. \
After providing your explanation, you must rate the response on a scale of 1 to 10 \
by strictly following this format: "[[rating]]", for example: "Rating: [[5]]".\n\n\
[Question]\n{input}\n\n[The Start of Assistant\'s Answer]\n{prediction}\n\
[The End of Assistant\'s Answer]'  # fmt: skip


def langchain_labeled_score_string(input: str, prediction: str, reference: str) -> tuple[str, str]:
    """What LabeledScoreStringEvalChain.from_llm(criteria=CRITERIA) sends for evaluate_strings(...)."""
    criteria_str = "\n".join(f"{k}: {v}" for k, v in CRITERIA.items()).strip()
    criteria_str = CRITERIA_INSTRUCTIONS + f"{criteria_str}\n" if criteria_str else ""
    human = HUMAN_WITH_REFERENCE.format(criteria=criteria_str, reference=reference, input=input, prediction=prediction)
    return SYSTEM_MESSAGE, human


# -- NIAN: llmonpy/needle-in-a-needlestack@eafb9b3, evaluator.py ------------------------------------------------------
PASS_ANSWER, FAIL_ANSWER = "aaa", "bbb"
SYSTEM_PROMPT = string.Template("""
You are an expert at evaluating the answers to questions based on the text of a limerick. You are
sure of yourself and always answer with an "$pass_answer" or "$fail_answer" without explanation.""").substitute(
    pass_answer=PASS_ANSWER, fail_answer=FAIL_ANSWER
)
ONE_SHOT_SNIPPET = """An example of a good answer to this question is:

$good_answer_text
"""
FEW_SHOT_SNIPPET = "Examples of good answers to this question are: \n$good_answer_text\n"
EVALUATION_PROMPT = "\n".join(  # its lines (two end in a space)
    [
        "",
        "I would like you to evaluate the answer to a question about a limerick.  The limerick is:",
        "",
        "$limerick_text",
        "",
        "The question is:",
        "",
        "$question_text",
        "",
        "$icl_text",
        "",
        "And this is the generated answer to the question:",
        "",
        "$generated_answer_text",
        "",
        "You need to determine if the generated answer passes or fails.  Pass means the answer has the same meaning as the good ",  # noqa: E501
        "answer.  It does not matter if the generated answer is more or less concise than the good answer.  Does the generated",  # noqa: E501
        'answer pass or fail? Please answer with an "aaa" if the generated answer passes or "bbb" if it fails. Do not provide ',  # noqa: E501
        'an explanation, only reply with "$pass_answer" or "$fail_answer".',
        "",
        "",
    ]
)


def nian_evaluation(
    limerick: str, question: str, answer: str, alternates: list[str], generated: str
) -> tuple[str, str]:
    """What DefaultEvaluator.evaluate sends (system prompt, evaluation prompt)."""
    if alternates:
        answer_string = ", ".join(["'{}'".format(a) for a in [answer, *alternates]])  # noqa: UP032 (NIAN's code)
        icl_text = string.Template(FEW_SHOT_SNIPPET).substitute(good_answer_text=answer_string)
    else:
        icl_text = string.Template(ONE_SHOT_SNIPPET).substitute(good_answer_text=answer)
    text = string.Template(EVALUATION_PROMPT).substitute(
        limerick_text=limerick,
        question_text=question,
        icl_text=icl_text,
        generated_answer_text=generated,
        pass_answer=PASS_ANSWER,
        fail_answer=FAIL_ANSWER,
    )
    return SYSTEM_PROMPT, text


# -- a run against the emulator ----------------------------------------------------------------------------------------

ITEMS = [
    ("ship-1", "Day 3: the Fern Swift came in from Porto and landed 10 crates of oats."),
    ("ship-2", "Day 5: the Dawn Tern came in from Naples and landed 43 crates of tallow."),
    ("ship-3", "Day 8: the Jade Curlew came in from Tallinn and landed 28 crates of cider."),
    ("ship-4", "Day 9: the Copper Wren came in from Riga and landed 18 crates of slate."),
]
QUESTIONS = [  # one with alternates (NIAN's few-shot form), one without (its one-shot form); {braces} kept as text
    {"item": "ship-1", "question": "How many crates of oats did the Fern Swift land?", "answer": "10",
     "alternates": ["10 crates", "The Fern Swift landed {10} crates."]},
    {"item": "ship-2", "question": "How many crates of tallow did the Dawn Tern land?", "answer": "43"},
]  # fmt: skip
SPEC = """\
nspec: 1
name: judge-prompts
seed: 3
haystack: {{stack: {{items: items.jsonl, questions: questions.jsonl}}, separator: "\\n"}}
grid: {{context_lengths: [120], depths: [50], negative_controls: true}}
prompt: {{user: "Log:\\n{{haystack}}\\nQuestion: {{question}}", reserve_tokens: 30}}
models: [{{id: openai/gpt-4.1-mini, mode: live, base_url: "{url}"}}]
scoring:
  - exact: "{{answer}}"
  - judge:
      models: [{{id: openai/gpt-4.1-mini, mode: live, base_url: "{url}"}}]
      when: always
      {judge}
run: {{retry: {{attempts: 1}}}}
"""
CUSTOM = (
    'prompt: {system: "Grade {{strictly}}.", user: "Q: {question}\\nAccepted:\\n{expected}\\nNeedle: {needle}\\n'
    'Answer: {answer}\\nReply aaa or bbb."}'
)


def votes(run: Path) -> set[str]:
    """The details of every vote of the run's latest grading."""
    return {v["detail"] for line in (run / "scores.jsonl").read_text().splitlines() for v in json.loads(line)["votes"]}


def judge_lines(run: Path, grading: Grading) -> dict[str, dict]:
    """The judge request lines ``grading`` asked, by cell id."""
    lines = [json.loads(t) for f in sorted((run / "judge" / "requests").iterdir()) for t in f.read_text().splitlines()]
    key = grading.key("openai/gpt-4.1-mini")
    return {line["custom_id"].rsplit("-", 1)[0]: line["body"] for line in lines if line["custom_id"].endswith(key)}


def test_preset_and_custom_judge_prompts_are_sent_as_the_references_sent_them(emulator, tmp_path):
    emu = emulator()
    (tmp_path / "items.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in ITEMS))
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(url=emu.openai_base_url, judge="prompt: nian"))
    run = pipeline.compile_spec(str(spec), tmp_path / "out").path  # the pipeline without its report: fast
    pipeline.submit(run)
    pipeline.collect(run, wait=True)
    pipeline.score(run, wait=True)
    # The emulator grades the presets' prompts, and their replies are read as the references read them; it does not
    # know a spec's own prompt, and answers it as a question: no verdict.
    assert votes(run) == {"aaa"}
    for name, judge, details in (
        ("needlehaystack", "prompt: needlehaystack\n      threshold: 7", {"score 10"}),
        ("custom", CUSTOM, {"no verdict: no verdict token"}),
    ):
        changed = tmp_path / f"{name}.yaml"
        changed.write_text(SPEC.format(url=emu.openai_base_url, judge=judge))
        pipeline.rescore(run, str(changed), wait=True)
        assert votes(run) == details
    # needlehaystack's prompt implies its rubric, and is planned with room for the explanation before its [[N]].
    loaded = load_spec(str(tmp_path / "needlehaystack.yaml"))
    assert loaded.data["scoring"][1]["judge"]["rubric"] == "score-10"  # written into the resolved spec
    (totals,) = plan(loaded.data, loaded.base_dir).judges
    assert totals["output_tokens_max"] == totals["requests"] * 512
    assert PRESETS["needlehaystack"].words_tokens("score-10") > 200

    cells = {c["cell_id"]: c for c in map(json.loads, (run / "cells.jsonl").read_text().splitlines())}
    answers = {
        r["cell_id"]: r["text"] for r in map(json.loads, (run / "answers" / "results.jsonl").read_text().splitlines())
    }
    nian = judge_lines(run, Grading.of({"prompt": "nian", "rubric": "pass-fail"}))
    haystack = judge_lines(run, Grading.of({"prompt": "needlehaystack", "rubric": "score-10", "threshold": 7}))
    custom_prompt = {"system": "Grade {{strictly}}.", "user": "Q: {question}\nAccepted:\n{expected}\nNeedle: {needle}"}
    custom_prompt["user"] += "\nAnswer: {answer}\nReply aaa or bbb."
    custom = judge_lines(run, Grading.of({"prompt": custom_prompt}))
    assert set(nian) == set(haystack) == set(custom) == set(cells)  # every cell, negative controls too (`always`)
    shapes = set()
    for cell_id, cell in cells.items():
        sent = [(m["role"], m["content"]) for m in nian[cell_id]["messages"]]
        needle = next((n["text"] for n in cell["needles"] if n["role"] == "target"), NO_ANSWER)
        expected, alternates = (cell["expected"] or [NO_ANSWER])[0], cell["alternates"]
        system, user = nian_evaluation(needle, cell["question"], expected, alternates, answers[cell_id])
        assert sent == [("system", system), ("user", user)]
        system, human = langchain_labeled_score_string(cell["question"], answers[cell_id], needle)
        assert [(m["role"], m["content"]) for m in haystack[cell_id]["messages"]] == [
            ("system", system),
            ("user", human),
        ]
        accepted = "\n".join([*cell["expected"], *alternates]) or NO_ANSWER
        user = f"Q: {cell['question']}\nAccepted:\n{accepted}\nNeedle: {needle}\nAnswer: {answers[cell_id]}"
        user += "\nReply aaa or bbb."
        assert [m["content"] for m in custom[cell_id]["messages"]] == ["Grade {strictly}.", user]
        assert all("response_format" not in body[cell_id] for body in (nian, haystack, custom))  # sent as written
        shapes.add((cell["negative"], bool(alternates)))
    assert shapes == {(True, False), (False, False), (False, True)}  # no answer, one-shot, few-shot


@pytest.mark.parametrize(
    "reply, vote, detail",
    [
        ("The answer matches the reference. Rating: [[8]]", "pass", "score 8"),
        ("It names 2 of the facts. Rating: [[3]]", "fail", "score 3"),  # the first number is not the score
        ("Rating: [[10]] (not [[2]])", "pass", "score 10"),  # the first [[...]] decides
        ("10", None, "no verdict: no [[rating]] of 1-10"),  # LangChain raises: no rating in double brackets
        ("Rating: [[8/10]]", None, "no verdict: no [[rating]] of 1-10"),
        ("Rating: [[ 8 ]]", None, "no verdict: no [[rating]] of 1-10"),
        ('{"score": 9}', None, "no verdict: no [[rating]] of 1-10"),  # no JSON was asked for
    ],
)
def test_needlehaystack_replies_are_read_as_langchain_reads_them(reply, vote, detail):
    got = parse_vote("score-10", reply, 7, PRESETS["needlehaystack"])
    assert (got.vote, got.detail) == (vote, detail)


@pytest.mark.parametrize(
    "reply, vote",
    [("aaa", "pass"), ("BBB.", "fail"), ("aaa, not bbb", None), ("Pass", None), ('{"verdict": "aaa"}', "pass")],
)
def test_nian_replies_are_read_by_its_tokens_and_one_without_a_single_token_is_no_vote(reply, vote):
    # NIAN counted a reply with both tokens or neither as a fail; here it is no vote, and asked again.
    assert parse_vote("pass-fail", reply, None, PRESETS["nian"]).vote == vote


def test_a_cell_expecting_several_values_shows_them_as_one_good_answer():
    graded = Graded("Which numbers?", ["12", "34"], ["twelve"], "12 and 34", False, "A 12.\nB 34.")
    _, user = PRESETS["nian"].messages("pass-fail", graded)
    assert "An example of a good answer to this question is:\n\n12, 34\n" in user
    assert graded.fields()["expected"] == "12\n34"  # all are needed; alternates belong to single needles
