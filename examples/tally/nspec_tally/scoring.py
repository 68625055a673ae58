"""`count_error`, the scorer of `tally`'s answers, and `within_tenth`, the metric its scores are reported by.

An answer's total is the last whole number it gives. Its score is 1 less its relative error (0 at an error of 100%
or more), a pass when the error is within `tolerance` crates; an answer with no number fails with score 0.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from nspec.scorers import Accumulator, GradeInput, Metric, Problem, Scorer, Verdict

_NUMBER = re.compile(r"\d[\d,]*")
# What a spec may write under `count_error:` (`nspec validate` checks it, editors offer it).
OPTIONS = {
    "description": "Grades a count by how far it is off: score 1 less the relative error; a pass within "
    "`tolerance` of the expected count.",
    "oneOf": [
        {"const": True},
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "tolerance": {
                    "description": "How far off (in units) a count may be and still pass.",
                    "type": "integer",
                    "minimum": 0,
                    "default": 0,
                }
            },
        },
    ],
}


class CountError(Scorer):
    name = "count_error"
    metric = "within_tenth"
    options_schema = OPTIONS

    def grade(self, answer: str, inp: GradeInput, options: Any) -> Verdict:
        expected = int(inp.expected[0])
        found = _NUMBER.findall(answer)
        if not found:
            return Verdict("fail", self.name, "gives no number", 0.0)
        given = int(found[-1].replace(",", ""))
        error = abs(given - expected)
        score = max(0.0, 1.0 - error / max(1, expected))
        tolerance = options.get("tolerance", 0) if isinstance(options, dict) else 0
        verdict = "pass" if error <= tolerance else "fail"
        return Verdict(verdict, self.name, f"gives {given} for {expected}", round(score, 6))

    def check(self, options: Any) -> Iterable[Problem]:
        return ()  # the schema says it all


class WithinTenth(Metric):
    """The share of cells whose count is within a tenth of the truth (a score of 0.9 or more)."""

    name = "within_tenth"
    label = "within 10%"
    percent = True

    def start(self) -> Accumulator:
        return _Share()


class _Share:
    def __init__(self) -> None:
        self.close, self.n = 0, 0

    def add(self, score: float) -> None:
        self.close += score >= 0.9
        self.n += 1

    def result(self) -> float | None:
        return self.close / self.n if self.n else None


COUNT_ERROR = CountError()
WITHIN_TENTH = WithinTenth()
