"""Needle instances of a cell: variables drawn, templates rendered, questions merged, answers collected."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nspec.templates import render

from . import lists
from .draws import Draws


@dataclass(frozen=True)
class NeedleInstance:
    """One needle placed in a cell."""

    needle_id: str  # the definition's id
    index: int  # copy number within the definition (targets first, then distractors)
    role: str  # "target" (asked about) or "distractor"
    text: str
    question: str
    answers: tuple[str, ...]
    alternates: tuple[str, ...]


@dataclass(frozen=True)
class CellNeedles:
    instances: tuple[NeedleInstance, ...]

    @property
    def targets(self) -> list[NeedleInstance]:
        return [n for n in self.instances if n.role == "target"]

    @property
    def question(self) -> str:
        """The distinct questions of the targets, in order, one per line (multi-value asks once)."""
        return "\n".join(dict.fromkeys(n.question for n in self.targets))

    @property
    def expected(self) -> list[str]:
        return list(dict.fromkeys(a for n in self.targets for a in n.answers))

    @property
    def alternates(self) -> list[str]:
        return list(dict.fromkeys(a for n in self.targets for a in n.alternates))


def needle_ids(needles: list[dict[str, Any]]) -> list[str]:
    return [n.get("id") or f"n{i + 1}" for i, n in enumerate(needles)]


def draw_needles(needles: list[dict[str, Any]], draws: Draws) -> CellNeedles:
    """Every needle instance of one cell, with variables drawn from ``draws``."""
    instances: list[NeedleInstance] = []
    for needle, nid in zip(needles, needle_ids(needles), strict=True):
        variables: dict[str, Any] = needle.get("vars", {})
        shared = {name: _draw(spec, draws) for name, spec in variables.items() if spec.get("scope") == "cell"}
        count, distractors = needle.get("count", 1), needle.get("distractors", 0)
        seen_keys: set[tuple[tuple[str, str], ...]] = set()
        for index in range(count + distractors):
            values = _distinct_values(variables, shared, draws, seen_keys)
            answers = needle["answer"] if isinstance(needle["answer"], list) else [needle["answer"]]
            instances.append(
                NeedleInstance(
                    needle_id=nid,
                    index=index,
                    role="target" if index < count else "distractor",
                    text=render(needle["text"], values),
                    question=render(needle["question"], values),
                    answers=tuple(render(a, values) for a in answers),
                    alternates=tuple(render(a, values) for a in needle.get("alternates", [])),
                )
            )
    return CellNeedles(tuple(instances))


def _distinct_values(
    variables: dict[str, Any], shared: dict[str, str], draws: Draws, seen: set[tuple[tuple[str, str], ...]]
) -> dict[str, str]:
    """Values for one copy; copies of a needle never repeat the same instance values (a distractor equal to the
    target would make the question ambiguous). Small value spaces may not allow it; then repeats are accepted."""
    for _ in range(100):
        own = {name: _draw(spec, draws) for name, spec in variables.items() if spec.get("scope") != "cell"}
        key = tuple(sorted(own.items()))
        if key not in seen or not own:
            seen.add(key)
            return {**shared, **own}
    return {**shared, **own}


def _draw(spec: dict[str, Any], draws: Draws) -> str:
    if "choice" in spec:
        options = spec["choice"] if isinstance(spec["choice"], list) else lists.load(spec["choice"])
        return str(draws.choice(options))
    if "digits" in spec:
        return draws.digits(spec["digits"])
    if "uuid" in spec:
        return draws.uuid4()
    words = lists.load("words")
    return str(spec.get("separator", "-")).join(draws.choice(words) for _ in range(spec["words"]))
