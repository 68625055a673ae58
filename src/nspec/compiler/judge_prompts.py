"""Judge prompts: the messages that ask a judge to grade one answer, and how its reply is read.

A spec's `judge.prompt` names a preset or gives its own `{system, user}` text:

- `nspec` (the default): nspec's own prompt, for either rubric, with structured output where a provider has it.
- `needlehaystack` (rubric score-10): the prompt needlehaystack's OpenAI evaluator sent, word for word.
- `nian` (rubric pass-fail): the prompt NIAN's evaluator sent, word for word.
- `{system, user}`: templates over {question}, {expected}, {answer} and {needle} (Python's str.format: {{ and }} are
  literal braces), sent as written.

The references' texts are kept in their own template syntax and filled by their own rule (string.Template for NIAN,
str.format for LangChain's f-string templates), so what is sent is what the reference sent for the same input.
Everything here is pure: validation, plan and the judge stage all use it.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .tokenizers import encoding

# The placeholders a spec's own judge prompt may use.
PLACEHOLDERS = ("question", "expected", "answer", "needle")
# What {expected} and {needle} read for a negative control: no answer and no needle exist.
NO_ANSWER = "none (the document does not contain the answer)"

# nspec's prompt: a verdict's tokens (16) as its reply; its words around the fields are at most 180 o200k tokens
# (checked in tests/test_costs.py).
JUDGE_ANSWER_TOKENS = 16
JUDGE_PROMPT_TOKENS = 180
ANSWER_OPEN, ANSWER_CLOSE = "<answer_to_grade>", "</answer_to_grade>"


@dataclass(frozen=True)
class Graded:
    """What a judge prompt is filled with: one cell's question, answers and needle, and the answer to grade."""

    question: str
    expected: list[str]  # every value the cell expects (several for a multi-value or multi-query cell)
    alternates: list[str]  # other answers that are also right (of a single needle)
    answer: str
    negative: bool
    needle: str | None  # the needles (or stack item) the question is about

    def accepted(self) -> list[str]:
        """The accepted answers: the expected answer and its alternates (any one is right), or, when the cell
        expects several values, those values (all are needed)."""
        return list(self.expected) if len(self.expected) > 1 else [*self.expected, *self.alternates]

    def fields(self) -> dict[str, str]:
        """The placeholders' values. A negative control has no expected answer and no needle: both read
        NO_ANSWER."""
        return {
            "question": self.question,
            "expected": NO_ANSWER if self.negative else "\n".join(self.accepted()),
            "answer": self.answer,
            "needle": NO_ANSWER if self.negative else self.needle or "",
        }


Render = Callable[[str, Graded], tuple[str | None, str]]  # (rubric, graded) -> (system, user)


@dataclass(frozen=True)
class JudgePrompt:
    """A judge prompt: how it is rendered, the rubric it implies, what it asks of the provider, and how its reply
    is read."""

    name: str  # the preset's name, or "custom"
    render: Render
    rubric: str | None = None  # the rubric it grades by (None: either)
    structured: bool = False  # ask providers that have structured output for the verdict as JSON, and read JSON
    answer_tokens: int = JUDGE_ANSWER_TOKENS  # the reply's budget (beside any reasoning)
    brackets: bool = False  # a score is read only from LangChain's "[[N]]", as LangChain reads it
    key: str = ""  # part of the judge requests' ids: another prompt asks anew (nspec's: none, as before)
    words: int | None = None  # its own words in o200k tokens, if estimated (None: counted from its text)

    def messages(self, rubric: str, graded: Graded) -> tuple[str | None, str]:
        """The (system, user) messages asking to grade ``graded`` by ``rubric``."""
        return self.render(rubric, graded)

    def words_tokens(self, rubric: str) -> int:
        """What the prompt's own words add to each request, beside the question, answers, needle and answer it is
        filled with (o200k tokens, as `nspec plan` counts judge prompts)."""
        if self.words is not None:
            return self.words
        empty = Graded("", [""], [], "", False, "")
        return sum(encoding("o200k_base").count(text or "") for text in self.messages(rubric, empty))


# -- nspec ------------------------------------------------------------------------------------------------------------

_NSPEC_SYSTEM = (
    "You grade answers to questions about a long document. You see only the passage the question is about, "
    "not the whole document: compare the answer with the expected answer. Be strict about facts, lenient "
    "about wording. An answer that says the document lacks the answer, or quotes text the passage does not "
    "hold, is not correct."
)
_NSPEC_SCALE = """\
Score the answer from 1 to 10:
1: unrelated to the expected answer.
3: minor relevance, but wrong.
5: moderately right, with inaccuracies.
7: aligned with the expected answer, with minor omissions.
10: completely accurate.
Reply with the score only."""


def _nspec(rubric: str, graded: Graded) -> tuple[str | None, str]:
    """nspec's prompt: the judge sees the needle (or stack item) the question is about, not the whole context, so
    it can tell a quote from an invention."""
    if graded.negative:
        truth = (
            "Expected answer: none. The document does not contain the answer; a correct answer says so and "
            "gives no value of its own."
        )
    else:
        truth = "Expected answer: " + " | ".join(graded.expected)
    lines = [f"Question: {graded.question}"]
    if graded.needle and not graded.negative:
        lines.append(f"The passage the question is about:\n<passage>\n{graded.needle}\n</passage>")
    lines.append(truth)
    if graded.alternates:
        lines.append("Other answers that are also correct (examples):")
        lines += [f"- {a}" for a in graded.alternates]
    lines.append(f"Answer to grade:\n{ANSWER_OPEN}\n{graded.answer}\n{ANSWER_CLOSE}")
    if rubric == "pass-fail":
        lines.append(
            "If the answer to grade is correct, reply aaa. If it is not, reply bbb. Reply with aaa or bbb only."
        )
    else:
        lines.append(_NSPEC_SCALE)
    return _NSPEC_SYSTEM, "\n\n".join(lines)


# -- needlehaystack ---------------------------------------------------------------------------------------------------
# gkamradt/LLMTest_NeedleInAHaystack@7b90d285651b68d39a94f3d3bd3672f84192c989, needlehaystack/evaluators/openai.py:
# OpenAIEvaluator.evaluate_response calls load_evaluator("labeled_score_string", criteria=CRITERIA) and
# evaluate_strings(prediction=<the answer>, reference=<true_answer: the needle, run.py>, input=<the question>).
NEEDLEHAYSTACK_CRITERIA = {
    "accuracy": """
                Score 1: The answer is completely unrelated to the reference.
                Score 3: The answer has minor relevance but does not align with the reference.
                Score 5: The answer has moderate relevance but contains inaccuracies.
                Score 7: The answer aligns with the reference but has minor omissions.
                Score 10: The answer is completely accurate and aligns perfectly with the reference.
                Only respond with a numberical score"""
}
# langchain 0.1.9 (the version needlehaystack's requirements.txt pins), langchain/evaluation/scoring/prompt.py:
# SYSTEM_MESSAGE, CRITERIA_INSTRUCTIONS and the human message of SCORING_TEMPLATE_WITH_REFERENCE (an f-string
# template: Python's str.format).
LANGCHAIN_SYSTEM_MESSAGE = "You are a helpful assistant."
LANGCHAIN_CRITERIA_INSTRUCTIONS = "For this evaluation, you should primarily consider the following criteria:\n"
LANGCHAIN_SCORING_WITH_REFERENCE = (
    "[Instruction]\nPlease act as an impartial judge "
    "and evaluate the quality of the response provided by an AI "
    "assistant to the user question displayed below. {criteria}"
    "[Ground truth]\n{reference}\nBegin your evaluation "
    "by providing a short explanation. Be as objective as possible. "
    "After providing your explanation, you must rate the response on a scale of 1 to 10 "
    'by strictly following this format: "[[rating]]", for example: "Rating: [[5]]".\n\n'
    "[Question]\n{input}\n\n[The Start of Assistant's Answer]\n{prediction}\n"
    "[The End of Assistant's Answer]"
)


def _langchain_criteria(criteria: Mapping[str, str]) -> str:
    """The criteria as LabeledScoreStringEvalChain.from_llm (langchain/evaluation/scoring/eval_chain.py) puts them
    into its prompt."""
    text = "\n".join(f"{k}: {v}" for k, v in criteria.items()).strip()
    return LANGCHAIN_CRITERIA_INSTRUCTIONS + f"{text}\n"


def _needlehaystack(rubric: str, graded: Graded) -> tuple[str | None, str]:
    fields = graded.fields()
    user = LANGCHAIN_SCORING_WITH_REFERENCE.format(
        criteria=_langchain_criteria(NEEDLEHAYSTACK_CRITERIA),
        reference=fields["needle"],
        input=fields["question"],
        prediction=fields["answer"],
    )
    return LANGCHAIN_SYSTEM_MESSAGE, user


# -- nian -------------------------------------------------------------------------------------------------------------
# llmonpy/needle-in-a-needlestack@eafb9b3fb01fb9b80569df52e75f1aa0196ee21f, evaluator.py: SYSTEM_PROMPT,
# ONE_SHOT_SNIPPET, FEW_SHOT_SNIPPET and EVALUATION_PROMPT (string.Template), as DefaultEvaluator.evaluate fills
# them; the system prompt is sent as the system message (llm_client.py).
NIAN_PASS, NIAN_FAIL = "aaa", "bbb"
NIAN_SYSTEM_PROMPT = (
    "\nYou are an expert at evaluating the answers to questions based on the text of a limerick. You are\n"
    'sure of yourself and always answer with an "$pass_answer" or "$fail_answer" without explanation.'
)
NIAN_ONE_SHOT_SNIPPET = "An example of a good answer to this question is:\n\n$good_answer_text\n"
NIAN_FEW_SHOT_SNIPPET = "Examples of good answers to this question are: \n$good_answer_text\n"
NIAN_EVALUATION_PROMPT = (
    "\nI would like you to evaluate the answer to a question about a limerick.  The limerick is:\n\n"
    "$limerick_text\n\nThe question is:\n\n$question_text\n\n$icl_text\n\n"
    "And this is the generated answer to the question:\n\n$generated_answer_text\n\n"
    "You need to determine if the generated answer passes or fails.  Pass means the answer has the same meaning "
    "as the good \n"
    "answer.  It does not matter if the generated answer is more or less concise than the good answer.  Does the "
    "generated\n"
    'answer pass or fail? Please answer with an "aaa" if the generated answer passes or "bbb" if it fails. Do not '
    "provide \n"
    'an explanation, only reply with "$pass_answer" or "$fail_answer".\n\n'
)


def _nian(rubric: str, graded: Graded) -> tuple[str | None, str]:
    """NIAN's prompt. Its good answers are the question's answer and alternates (a few-shot list when there are
    alternates); a cell expecting several values shows them together as its one good answer."""
    fields = graded.fields()
    if graded.negative:
        good = [NO_ANSWER]
    elif len(graded.expected) > 1:
        good = [", ".join(graded.expected)]
    else:
        good = graded.accepted()
    if len(good) > 1:
        answers = ", ".join(f"'{a}'" for a in good)
        icl = string.Template(NIAN_FEW_SHOT_SNIPPET).substitute(good_answer_text=answers)
    else:
        icl = string.Template(NIAN_ONE_SHOT_SNIPPET).substitute(good_answer_text=good[0])
    user = string.Template(NIAN_EVALUATION_PROMPT).substitute(
        limerick_text=fields["needle"],
        question_text=fields["question"],
        icl_text=icl,
        generated_answer_text=fields["answer"],
        pass_answer=NIAN_PASS,
        fail_answer=NIAN_FAIL,
    )
    system = string.Template(NIAN_SYSTEM_PROMPT).substitute(pass_answer=NIAN_PASS, fail_answer=NIAN_FAIL)
    return system, user


# -- presets and the spec's own ---------------------------------------------------------------------------------------

PRESETS: dict[str, JudgePrompt] = {
    "nspec": JudgePrompt("nspec", _nspec, structured=True, words=JUDGE_PROMPT_TOKENS),
    # The explanation LangChain's prompt asks for comes before the rating: room for it (the reference set no limit).
    "needlehaystack": JudgePrompt(
        "needlehaystack", _needlehaystack, "score-10", answer_tokens=512, brackets=True, key="needlehaystack"
    ),
    "nian": JudgePrompt("nian", _nian, "pass-fail", key="nian"),
}
DEFAULT_PRESET = "nspec"


def custom_prompt(system: str | None, user: str) -> JudgePrompt:
    """A spec's own prompt: its templates filled with the placeholders' values, sent as written."""

    def render(rubric: str, graded: Graded) -> tuple[str | None, str]:
        fields = graded.fields()
        return (None if system is None else system.format_map(fields)), user.format_map(fields)

    digest = hashlib.sha256(f"{system}\0{user}".encode()).hexdigest()[:12]
    return JudgePrompt("custom", render, key=f"custom-{digest}")


def judge_prompt(setting: Any) -> JudgePrompt:
    """The prompt a judge entry's `prompt` names (a validated spec's: a preset's name, `{system, user}`, or none
    for the default)."""
    if setting is None:
        return PRESETS[DEFAULT_PRESET]
    if isinstance(setting, str):
        return PRESETS[setting]
    return custom_prompt(setting.get("system"), setting["user"])


def judge_rubric(settings: Mapping[str, Any]) -> str:
    """The rubric a judge entry grades by: its own, else the one its prompt implies, else pass-fail."""
    return str(settings.get("rubric") or judge_prompt(settings.get("prompt")).rubric or "pass-fail")
