"""RULER's metrics as nspec's scorers, measured against RULER's own definitions on the same answers.

The reference below is RULER's code word for word (NVIDIA/RULER, scripts/eval/synthetic/constants.py and
scripts/eval/evaluate.py's postprocess_pred; Apache License 2.0): a task's score is the metric over all its
predictions, so nspec's mean per-cell score times 100, rounded as RULER rounds, must equal it.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nspec.runners.grading.grader import Scoring, grade
from nspec.scorers import GradeInput


def postprocess_pred(predict_str: str, task_config: dict) -> str:
    predict_str = predict_str.strip()

    # Remove all non-printable characters
    np_pattern = re.compile(r"[\x00-\x1f]")
    predict_str = np_pattern.sub("\n", predict_str).strip()

    return predict_str


def string_match_part(preds, refs):
    score = (
        sum([max([1.0 if r.lower() in pred.lower() else 0.0 for r in ref]) for pred, ref in zip(preds, refs)])  # noqa: B905
        / len(preds)
        * 100
    )
    return round(score, 2)


def string_match_all(preds, refs):
    score = (
        sum(
            [sum([1.0 if r.lower() in pred.lower() else 0.0 for r in ref]) / len(ref) for pred, ref in zip(preds, refs)]  # noqa: B905
        )
        / len(preds)
        * 100
    )
    return round(score, 2)


WORDS = st.sampled_from(["Apple", "apple", "7421", "pear", "Fig", "İstanbul", "ß", "a b", "\t", "x\ny", " "])
ANSWER = st.lists(WORDS, max_size=6).map(" ".join)
REFS = st.lists(WORDS.filter(lambda w: w.strip()), min_size=1, max_size=4, unique=True)


def scores(kind: str, answers: list[str], references: list[list[str]]) -> list[float]:
    out = []
    for answer, refs in zip(answers, references, strict=True):
        # RULER's references: every one required (all), or any one (part: nspec's expected answer and alternates)
        inp = GradeInput(tuple(refs)) if kind == "string_match_all" else GradeInput((refs[0],), tuple(refs[1:]))
        (verdict,) = Scoring([{kind: True}]).verdicts(answer, inp)
        assert verdict.verdict == ("pass" if verdict.score == 1.0 else "fail")
        out.append(verdict.score)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(ANSWER, REFS), min_size=1, max_size=8))
def test_string_match_all_and_part_are_ruler_s(cases):
    answers = [a for a, _ in cases]
    references = [r for _, r in cases]
    preds = [postprocess_pred(a, {}) for a in answers]
    for kind, reference in (("string_match_all", string_match_all), ("string_match_part", string_match_part)):
        mine = scores(kind, answers, references)
        assert round(sum(mine) / len(mine) * 100, 2) == reference(preds, references), kind


@pytest.mark.parametrize(
    "answer, score, verdict",
    [
        ("The numbers are 111 and 222.", 1.0, "pass"),
        ("Only 111.", 0.5, "fail"),
        ("Nothing.", 0.0, "fail"),
    ],
)
def test_string_match_all_scores_the_share_and_passes_at_all(answer, score, verdict):
    got = grade(answer, expected=["111", "222"], require="all", scoring=[{"string_match_all": True}])
    assert (got.score, got.verdict) == (score, verdict)
    half = grade(answer, expected=["111", "222"], require="all", scoring=[{"string_match_all": {"threshold": 0.5}}])
    assert half.verdict == ("pass" if score >= 0.5 else "fail")
