"""Scorers and metrics: what a scorer plugin implements, and the registries they are found in.

A **scorer** grades one answer: ``grade(answer, GradeInput, options) -> Verdict``. It declares

- ``options_schema``: the JSON Schema (draft 2020-12, self-contained: no `$ref`) of what a spec writes under its
  name, shorthand forms included (`contains: "{answer}"`, `number: true`) and its `description`. `nspec validate`
  checks each scoring entry against it, located like the spec's own errors, and the spec schema editors read is
  generated from the installed scorers' (`nspec schema --print`);
- ``metric``: the name of the registered metric its scores aggregate by, which the report's tables use;
- optionally ``check(options)``: what the schema cannot say (a template's placeholders, a pattern that does not
  compile), as `(path under its options, message)` pairs; called with options its schema accepts.

A **metric** declares a ``label`` for tables ("pass rate", "F1"), whether it is shown as a percentage
(``percent``: its value x 100), and how cell scores aggregate, streaming: ``start()`` gives an accumulator that
is handed each cell's score (`add`) and gives the aggregate (`result`), so a report of 100,000 cells never holds
their list.

Both come through the registry every kind of extension does (`nspec.plugins`): the entry-point groups
`nspec.scorers` and `nspec.metrics`, where nspec's own register exactly as a third party's would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from nspec.plugins import Registry, named_itself

Accepted = tuple[tuple[str, ...], ...]
Outcome = Literal["pass", "fail", "undecided"]
Problem = tuple[tuple[str | int, ...], str]  # where under a scorer's options, and what is wrong there
JUDGE = "judge"  # the scoring entry that asks models, not a scorer: it grades what the scorers leave undecided
JUDGED_METRIC = "pass_rate"  # what a scoring of judges alone aggregates by: their verdicts score 1 or 0
SCORED_METRIC = "judge_score"  # what score-10 judges without a threshold aggregate by: their mean score, 1-10


@dataclass(frozen=True)
class Verdict:
    """One grader's decision on one answer.

    ``verdict`` is "pass", "fail" or "undecided" (a judge should look); ``scorer`` names the scorer that decided;
    ``reason`` says why in a few words; ``score`` is 1 for a pass, 0 for a fail, the share of expected answers
    found for multi-value answers, and None while undecided. ``rule`` names the step of the scorer that gave the
    verdict (`auto` and `negative`: see docs/scoring.md, where each rule's measured precision is), for tables.
    """

    verdict: Outcome
    scorer: str
    reason: str
    score: float | None = None
    rule: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "scorer": self.scorer,
            "rule": self.rule or self.scorer,
            "verdict": self.verdict,
            "reason": self.reason,
            "score": self.score,
        }


@dataclass(frozen=True)
class GradeInput:
    """What a scorer sees of one cell: its expected answers (all of them required where there are several), other
    accepted answers, the question, the text of the needle it is about, and its task family's data."""

    expected: tuple[str, ...]
    alternates: tuple[str, ...] = ()
    question: str | None = None
    needle: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, cell: Mapping[str, Any]) -> GradeInput:
        """A cell of cells.jsonl, as its scorers see it."""
        return cls(
            tuple(cell["expected"]),
            tuple(cell.get("alternates", [])),
            cell.get("question"),
            needle_text(cell),
            cell.get("data", {}),
        )

    @property
    def accepted(self) -> Accepted:
        """The accepted answers: the expected answer or any alternate; every value when it expects several (a
        multi-value or multi-query cell, whose alternates belong to single needles and are shown to judges only)."""
        if len(self.expected) > 1:
            return (self.expected,)
        return tuple((a,) for a in dict.fromkeys((*self.expected, *self.alternates)))


def needle_text(cell: Mapping[str, Any]) -> str | None:
    """The text of the needles (or stack item) the question is about."""
    texts = [n["text"] for n in cell.get("needles", []) if n.get("role") == "target" and "text" in n]
    return "\n".join(dict.fromkeys(texts)) or None


class Scorer:
    """A scorer a spec names in `scoring` (see the module's docstring): subclass it, declare `name`, `metric` and
    `options_schema`, and write `grade`; `check` is optional."""

    name: str
    metric: str  # the registered metric its scores aggregate by
    options_schema: Mapping[str, Any]  # the JSON Schema of its options, with a `description` of what it does

    def grade(self, answer: str, inp: GradeInput, options: Any) -> Verdict:
        """``answer`` graded against ``inp`` with the options the spec gives (`True`, text or a mapping, as its
        schema allows): a verdict with a score in [0, 1]."""
        raise NotImplementedError

    def check(self, options: Any) -> Iterable[Problem]:
        """What its schema cannot say of options it accepts (a template's placeholders, a pattern that does not
        compile): (path under its options, message) pairs."""
        return ()


class Accumulator(Protocol):
    """A metric's running aggregate of cell scores."""

    def add(self, score: float) -> None: ...

    def result(self) -> float | None:
        """The aggregate; None before any score."""
        ...


class Metric:
    """How cell scores aggregate (see the module's docstring): subclass it, declare `name`, `label` and `percent`,
    and write `start`."""

    name: str
    label: str  # what its numbers are, for tables: "pass rate", "F1", "similarity"
    percent: bool  # whether its value is shown x 100 (as RULER shows its scores)

    def start(self) -> Accumulator:
        """A fresh running aggregate."""
        raise NotImplementedError


def _metric_problem(name: str, loaded: Any) -> str | None:
    if not isinstance(loaded, Metric):
        return "is not a metric: its object must be an instance of a subclass of nspec.scorers.Metric"
    problem = named_itself(name, loaded)
    if problem is not None:
        return problem
    if not isinstance(getattr(loaded, "label", None), str):
        return "declares no `label` (what its numbers are, for tables)"
    if not isinstance(getattr(loaded, "percent", None), bool):
        return "declares no `percent` (true or false: whether it is shown x 100)"
    return None


def _scorer_problem(name: str, loaded: Any) -> str | None:
    if not isinstance(loaded, Scorer):
        return "is not a scorer: its object must be an instance of a subclass of nspec.scorers.Scorer"
    problem = named_itself(name, loaded)
    if problem is not None:
        return problem
    metric = getattr(loaded, "metric", None)
    if not isinstance(metric, str):
        return "declares no `metric` (the name of a registered metric)"
    if metric not in METRICS:
        return f"declares the metric {metric!r}, which is not installed: the installed metrics are " + ", ".join(
            METRICS.names()
        )
    return _schema_problem(getattr(loaded, "options_schema", None))


def _schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot be an extension's options schema (None when it can): not a JSON Schema (draft
    2020-12), or not self-contained."""
    if not isinstance(schema, Mapping):
        return "declares no `options_schema` (the JSON Schema of its options)"
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.absolute_path).lstrip(".")
        return f"declares an options schema that is not a JSON Schema ({where or 'at its top'}: {exc.message[:300]})"
    if _refers(schema):
        return "declares an options schema with a `$ref`: it must be self-contained (it is validated on its own)"
    return None


def _refers(schema: Any) -> bool:
    if isinstance(schema, Mapping):
        return "$ref" in schema or any(_refers(v) for v in schema.values())
    return isinstance(schema, list) and any(_refers(v) for v in schema)


METRICS: Registry[Metric] = Registry("nspec.metrics", "metric", "metrics", _metric_problem)
SCORERS: Registry[Scorer] = Registry("nspec.scorers", "scorer", "scorers", _scorer_problem)


def metric_of(scoring: Iterable[Mapping[str, Any]]) -> Metric:
    """The metric a well-formed, resolved scoring list's scores aggregate by: its first scorer's (judges aside);
    judges alone score 1 or 0, or 1-10 where they grade score-10 without a threshold."""
    entries = list(scoring)
    kinds = [kind for entry in entries for kind in entry if kind != JUDGE]
    if kinds:
        return METRICS.get(SCORERS.get(kinds[0]).metric)
    judges = [entry[JUDGE] for entry in entries if JUDGE in entry]
    return METRICS.get(SCORED_METRIC if judges and scores_only(judges[0]) else JUDGED_METRIC)


def scores_only(judge: Mapping[str, Any]) -> bool:
    """Whether a resolved judge entry scores without verdicts: rubric score-10 and no threshold."""
    return judge.get("rubric") == "score-10" and judge.get("threshold") is None
