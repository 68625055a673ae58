"""RULER's scores, as NVIDIA/RULER computes them: ``scripts/eval/synthetic/constants.py`` (the two metrics and which
task uses which) and ``scripts/eval/evaluate.py`` (how a prediction is cleaned first); and the scorers a spec names
for them (`string_match_all`, `string_match_part`, and `ruler`, each cell's task's own). RULER's results table (per
length the average of the task scores, the two weighted averages, the effective length) is the `ruler` family's
headline table, which the report makes from the family's declaration (`runners.report.headline`).

- ``string_match_all``: per sample, the share of the expected strings found in the prediction (case-insensitive
  substring); the task's score is their mean in percent, rounded to 2 decimals. Used by niah, vt, cwe, fwe.
- ``string_match_part``: per sample, 1 if any expected string is found, else 0; same mean and rounding. Used by qa.
- A prediction is stripped, its control characters (U+0000 to U+001F) made newlines, and stripped again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from nspec.scorers import GradeInput, Verdict

from .builtin import BuiltIn, options_of, threshold, true_or

_CONTROL = re.compile(r"[\x00-\x1f]")

Metric = Callable[[Sequence[str], Sequence[Sequence[str]]], float]


def postprocess(prediction: str) -> str:
    """RULER's ``postprocess_pred``."""
    return _CONTROL.sub("\n", prediction.strip()).strip()


def share_found(prediction: str, references: Sequence[str]) -> float:
    """One sample under ``string_match_all``: the share of ``references`` found in ``prediction``."""
    found = prediction.lower()
    return sum(1.0 if r.lower() in found else 0.0 for r in references) / len(references)


def any_found(prediction: str, references: Sequence[str]) -> float:
    """One sample under ``string_match_part``: 1 if any of ``references`` is found in ``prediction``."""
    found = prediction.lower()
    return max(1.0 if r.lower() in found else 0.0 for r in references)


def string_match_all(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """RULER's ``string_match_all`` (predictions already post-processed)."""
    score = sum(share_found(p, r) for p, r in zip(predictions, references, strict=True)) / len(predictions) * 100
    return round(score, 2)


def string_match_part(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """RULER's ``string_match_part`` (predictions already post-processed)."""
    score = sum(any_found(p, r) for p, r in zip(predictions, references, strict=True)) / len(predictions) * 100
    return round(score, 2)


# synthetic.yaml's 13 tasks, each with its metric (eval/synthetic/constants.py)
TASKS: dict[str, Metric] = {
    **{
        name: string_match_all
        for name in (
            "niah_single_1",
            "niah_single_2",
            "niah_single_3",
            "niah_multikey_1",
            "niah_multikey_2",
            "niah_multikey_3",
            "niah_multivalue",
            "niah_multiquery",
        )
    },
    "vt": string_match_all,
    "cwe": string_match_all,
    "fwe": string_match_all,
    "qa_1": string_match_part,
    "qa_2": string_match_part,
}


def task_score(task: str, predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """A task's score at one length, 0-100, from its raw predictions: RULER's evaluate.py for one task."""
    return TASKS[task]([postprocess(p) for p in predictions], references)


def _string_match_all(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    """RULER's `string_match_all`: the share of the expected strings the answer holds (case-insensitive
    substrings, after RULER's cleaning); a pass when all are there (or the share reaches `threshold`)."""
    score = share_found(postprocess(answer), inp.expected)
    ok = score >= float(options_of(spec).get("threshold", 1.0))
    found = round(score * len(inp.expected))
    return Verdict("pass" if ok else "fail", "string_match_all", f"holds {found} of {len(inp.expected)}", score)


def _string_match_part(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    """RULER's `string_match_part` (its QA metric): 1 when the answer holds any of the references (the expected
    answers and alternates, case-insensitive substrings), else 0."""
    references = list(dict.fromkeys((*inp.expected, *inp.alternates)))
    score = any_found(postprocess(answer), references)
    reason = "holds a reference answer" if score else f"holds none of {len(references)} reference answers"
    return Verdict("pass" if score else "fail", "string_match_part", reason, score)


def _ruler(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    """RULER's metric of the cell's task, as the `ruler` family names it in the cell's data (`data.metric`)."""
    metric = inp.data.get("metric")
    if metric not in _TASK_METRICS:
        return Verdict("undecided", "ruler", "the cell names no RULER metric (not a `ruler` task's cell)")
    return _TASK_METRICS[metric].grade(answer, inp, spec)


STRING_MATCH_ALL = BuiltIn(
    "string_match_all",
    "share_found",
    true_or(
        "RULER's metric for its niah, variable-tracking and word-extraction tasks (NVIDIA/RULER "
        "scripts/eval/synthetic/constants.py): the score is the share of expected answers found in the answer as "
        "case-insensitive substrings; pass when all are found (or the share reaches `threshold`).",
        threshold=threshold("Share of expected answers that passes. Default 1 (all)."),
    ),
    _string_match_all,
)
STRING_MATCH_PART = BuiltIn(
    "string_match_part",
    "pass_rate",
    true_or(
        "RULER's metric for its QA tasks: 1 (pass) when the answer holds any of the expected answers or alternates "
        "as a case-insensitive substring, else 0 (fail)."
    ),
    _string_match_part,
)
_TASK_METRICS = {s.name: s for s in (STRING_MATCH_ALL, STRING_MATCH_PART)}  # what a `ruler` cell names
RULER = BuiltIn(
    "ruler",
    "mean_score",
    true_or(
        "RULER's own metric for each cell's task, as the `ruler` task family names it: string_match_part for qa_1 "
        "and qa_2, string_match_all for the others (what a spec running several RULER tasks at once grades with)."
    ),
    _ruler,
)
