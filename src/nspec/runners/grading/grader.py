"""Grading one answer: `grade()` (also `nspec.grade`), and a spec's scoring list run over a cell (`Scoring`).

`nspec score` grades every cell through `Scoring.verdicts`, which `grade()` is built on, so an answer graded in a
notebook and the same answer in a run always get the same verdict.

A scorer (`nspec.scorers.Scorer`, found by name in the `nspec.scorers` registry: nspec's own in `text`, `cascade`,
`ruler` and `openai_graders`) sees the cell's expected answers, alternates, question, needle and its task family's
data, and returns a verdict with a score in [0, 1] (continuous where its metric is: RULER's `string_match_all`
gives the share found) and a pass at its threshold.

Accepted answers are alternatives, each a tuple of values that must all be given: `("Paris",), ("the capital",)`
accepts either; `("111", "222")` needs both (a multi-value cell). An empty set of alternatives means the context
does not hold the answer (a negative control): the right reply says so and invents nothing, whatever the scorers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from nspec.errors import UserError
from nspec.scorers import JUDGE, SCORERS, GradeInput, Scorer, Verdict

from . import freetext
from .text import says_not_found

DEFAULT_SCORING: tuple[dict[str, Any], ...] = ({"auto": True},)
_VALUE = re.compile(r"\d{3,}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)


def grade(
    answer: str,
    *,
    expected: Sequence[str],
    question: str | None = None,
    needle: str | None = None,
    scoring: Sequence[Mapping[str, Any]] | None = None,
    require: Literal["any", "all"] = "any",
    data: Mapping[str, Any] | None = None,
) -> Verdict:
    """Grade one answer exactly as ``nspec score`` would.

    - ``expected``: the accepted answers; an empty list means the context holds no answer (a negative control), so
      the right reply says the answer is not there and invents no value.
    - ``question``: the question asked; its words are not taken as evidence that the answer is right.
    - ``needle``: the text of the needle or stack item the question is about; quotes in the answer are checked
      against it, and an answer about something else is told apart from a paraphrase.
    - ``scoring``: a spec's `scoring` list (e.g. ``[{"number": True}, {"auto": True}]``); None is the default
      cascade, ``[{"auto": True}]``. The first scorer that decides gives the verdict. A `judge` entry is skipped:
      grading here never calls a model, so what a run would send to judges comes back "undecided".
    - ``require="all"``: every expected answer must be given (a multi-value question); the score is the share given.
    - ``data``: the cell's task-family data, for scorers that read it.

    >>> grade("By composing an elegy for his friend.", expected=["He composed an elegy"],
    ...       question="What did the bard do?").verdict
    'pass'
    """
    if isinstance(expected, str):
        raise UserError("expected must be a list of accepted answers, e.g. expected=['Paris']")
    values = tuple(str(e) for e in expected)
    given = values if require == "all" else values[:1]
    inp = GradeInput(given, () if require == "all" else values[1:], question, needle, data or {})
    return decide((_default() if scoring is None else Scoring(scoring)).verdicts(answer, inp))


@cache
def _default() -> Scoring:
    """The default scoring, checked once."""
    return Scoring(None)


def decide(verdicts: Sequence[Verdict]) -> Verdict:
    """The first decisive verdict; else the first scorer's undecided one."""
    for verdict in verdicts:
        if verdict.verdict != "undecided":
            return verdict
    return verdicts[0] if verdicts else Verdict("undecided", "none", "no scorer")


class Scoring:
    """A scoring list (a spec's `scoring`; None: the default cascade), checked and resolved to its installed scorers
    once: a list nspec cannot grade with is refused as `nspec validate` refuses it in a spec (a `UserError`)."""

    def __init__(self, entries: Sequence[Mapping[str, Any]] | None) -> None:
        self.scorers: list[tuple[Scorer, Any]] = []
        phrases: list[str] = []
        for i, entry in enumerate(DEFAULT_SCORING if entries is None else entries):
            if not isinstance(entry, Mapping) or len(entry) != 1:
                raise UserError(f"scoring[{i}] must be a mapping with exactly one key, the scorer's kind")
            ((kind, options),) = entry.items()
            if kind == JUDGE:
                continue
            self.scorers.append((checked(f"scoring[{i}]", kind, options), options))
            if isinstance(options, Mapping):  # a scorer's `not_found` phrases grade negative controls too
                phrases += options.get("not_found", ())
        self.not_found = tuple(phrases)

    def verdicts(self, answer: str, inp: GradeInput) -> list[Verdict]:
        """Every scorer's verdict, in the order of the list (judges excluded); one verdict for a negative control;
        for what is not text (None, a number), one undecided verdict."""
        if not isinstance(answer, str):
            return [Verdict("undecided", "none", f"the answer is not text ({type(answer).__name__})", None, "not-text")]
        if not inp.accepted:
            return [negative(answer, inp.question, self.not_found)]
        return [scorer.grade(answer, inp, options) for scorer, options in self.scorers]


def checked(at: str, kind: str, options: Any) -> Scorer:
    """The installed scorer ``kind``, its ``options`` (at ``at`` in the scoring list) valid by its declarations."""
    scorer = SCORERS.get(kind)
    error = best_match(Draft202012Validator(scorer.options_schema).iter_errors(options))
    if error is not None:
        raise UserError(f"{at}.{kind}{_path(error.absolute_path)}: {error.message}")
    problem = next(iter(scorer.check(options)), None)
    if problem is not None:
        raise UserError(f"{at}.{kind}{_path(problem[0])}: {problem[1]}")
    return scorer


def _path(keys: Sequence[str | int]) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys)


def negative(answer: str, question: str | None, phrases: Sequence[str]) -> Verdict:
    """A negative control is right only if it says the answer is not there and invents no value."""
    if len(answer) > freetext.LONGEST:
        return Verdict("undecided", "negative", freetext.TOO_LONG, None, "negative.too-long")
    asked = set(_VALUE.findall(question or ""))
    not_found = says_not_found(answer, phrases)
    invented = any(v not in asked for v in _VALUE.findall(freetext.clean(answer)))
    if not_found and not invented:
        return Verdict("pass", "negative", "says not found and invents nothing", 1.0, "negative.not-found")
    if invented and not not_found:
        return Verdict("fail", "negative", "invents a value", 0.0, "negative.invents-value")
    if not not_found:
        return Verdict("fail", "negative", "does not say the answer is missing", 0.0, "negative.answers")
    return Verdict("undecided", "negative", "says not found but also gives a value", None, "negative.both")
