"""The shape of nspec's own scorers and metrics, registered by entry point as a third party's are (pyproject.toml):
a scorer is a `BuiltIn` (its grading function with its declarations), and every built-in metric is a `Mean` of
cell scores under its own label."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nspec.scorers import GradeInput, Metric, Problem, Scorer, Verdict


def _nothing(options: Any) -> Iterable[Problem]:
    return ()


@dataclass(frozen=True)
class BuiltIn(Scorer):
    """A scorer of nspec's own: its grading function and its check of options are fields."""

    name: str
    metric: str
    options_schema: Mapping[str, Any]
    grader: Callable[[str, GradeInput, Any], Verdict]
    checker: Callable[[Any], Iterable[Problem]] = _nothing

    def grade(self, answer: str, inp: GradeInput, options: Any) -> Verdict:
        return self.grader(answer, inp, options)

    def check(self, options: Any) -> Iterable[Problem]:
        return self.checker(options)


@dataclass
class RunningMean:
    """A running mean."""

    total: float = 0.0
    n: int = 0

    def add(self, score: float) -> None:
        self.total += score
        self.n += 1

    def result(self) -> float | None:
        return self.total / self.n if self.n else None


@dataclass(frozen=True)
class Mean(Metric):
    """The mean of the cell scores, shown x 100: every built-in metric, each named for what its scores are."""

    name: str
    label: str
    percent: bool = True

    def start(self) -> RunningMean:
        return RunningMean()


PASS_RATE = Mean("pass_rate", "pass rate")  # scores of 1 (pass) and 0 (fail)
MEAN_SCORE = Mean("mean_score", "score")  # 1 or 0, with partial credit where a scorer gives it
SHARE_FOUND = Mean("share_found", "share found")  # the share of the expected answers an answer holds
F1 = Mean("f1", "F1")
SIMILARITY = Mean("similarity", "similarity")
JUDGE_SCORE = Mean("judge_score", "mean score (1-10)", percent=False)  # score-10 judges without a threshold


def options_of(value: Any) -> dict[str, Any]:
    """A scorer's options as a mapping: a text is its `value`, `true` no options."""
    return value if isinstance(value, dict) else {"value": value} if isinstance(value, str) else {}


def true_or(description: str, **properties: Mapping[str, Any]) -> dict[str, Any]:
    """The options schema of a scorer written `name: true`, or with a mapping of ``properties``."""
    given = {"type": "object", "additionalProperties": False, "properties": properties}
    return {"description": description, "oneOf": [{"const": True}, given]}


def threshold(description: str) -> dict[str, Any]:
    """The option of a scorer whose score passes from a threshold on: a share, 1 by default."""
    return {"description": description, "type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1}
