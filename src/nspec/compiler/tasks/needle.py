"""The `needle` family: the spec's needles (sentences with drawn variables) placed in a text haystack at the grid's
depths, one or several questions asked of each context, and negative controls with none (Kamradt's needle in a
haystack, RULER's multi-key, multi-value and multi-query niah). What a spec with `needles:` and no `task:` runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from nspec.errors import CompileError

from .. import grid as grid_axes
from ..context import Insert
from ..draws import Draws
from ..needles import CellNeedles, draw_needles, needle_ids
from . import DEPTH, Draft, Family, Fill, PlacingTask, Setup, Slot, SpecChecks
from .family import Path


class NeedleFamily(Family):
    name = "needle"
    haystack_kind = "text"
    sections = (("needles",), ("placement",), ("grid", "questions_per_context"))
    axes = (DEPTH,)

    def task(self, setup: Setup) -> NeedleTask:
        return NeedleTask(setup)

    def check(self, spec: Mapping[str, Any], checks: SpecChecks) -> None:
        needles = spec.get("needles")
        if isinstance(spec.get("haystack"), dict) and needles is None:
            checks.error((), "missing `needles`: what to hide in the haystack")
        if not isinstance(needles, list):
            return
        ids: dict[str, int] = {}
        for i, needle in enumerate(needles):
            if not isinstance(needle, dict):
                continue
            check_needle(("needles", i), needle, checks)
            nid = needle.get("id")
            if isinstance(nid, str):
                if nid in ids:
                    checks.error(("needles", i, "id"), f"needle id {nid!r} is already used by needles[{ids[nid]}]")
                ids[nid] = i


def check_needle(path: Path, needle: Mapping[str, Any], checks: SpecChecks) -> None:
    """One needle's templates and variables: every variable used, and in its text (else the answer cannot be found
    in the context); copies of it told apart by a variable drawn per instance."""
    variables = needle.get("vars")
    names = set(variables) if isinstance(variables, dict) else set()
    fields: list[tuple[Path, Any]] = [
        ((*path, "text"), needle.get("text")),
        ((*path, "question"), needle.get("question")),
    ]
    answer = needle.get("answer")
    fields += (
        [((*path, "answer", i), a) for i, a in enumerate(answer)]
        if isinstance(answer, list)
        else [((*path, "answer"), answer)]
    )
    alternates = needle.get("alternates")
    if isinstance(alternates, list):
        fields += [((*path, "alternates", i), a) for i, a in enumerate(alternates)]
    found = [set(checks.template(p, text, names, "this needle (its `vars`)") or ()) for p, text in fields]
    in_text, used = found[0], set().union(*found)
    for name in sorted(names - used):
        checks.error((*path, "vars", name), f"variable {name!r} is never used", at_key=True)
    for name in sorted((names & used) - in_text):
        checks.error(
            (*path, "vars", name),
            f"variable {name!r} does not appear in the needle's `text`, so the answer cannot be found in the context",
            at_key=True,
        )
    if isinstance(variables, dict):
        for name, spec in variables.items():
            if isinstance(spec, dict) and "separator" in spec and "words" not in spec:
                checks.error(
                    (*path, "vars", name, "separator"), "`separator` applies to `words` variables only", at_key=True
                )
    count, distractors = needle.get("count", 1), needle.get("distractors", 0)
    per_instance = any(
        isinstance(s, dict) and s.get("scope", "instance") == "instance"
        for s in (variables.values() if isinstance(variables, dict) else ())
    )
    if isinstance(count, int) and isinstance(distractors, int) and (count > 1 or distractors > 0) and not per_instance:
        checks.error(
            path,
            "copies of this needle would all be identical: give it a variable with `scope: instance` (the default)",
        )


class NeedleTask(PlacingTask):
    def __init__(self, setup: Setup) -> None:
        spec = setup.spec
        self.needles: list[dict[str, Any]] = spec["needles"]
        self.seed = setup.seed
        self.depths = grid_axes.depths(setup.grid["depths"])
        self.per_context: int = setup.grid.get("questions_per_context", 1)
        self.negatives = setup.negatives
        self.placement: str = spec.get("placement", "spread")

    def cells(self, lengths: Sequence[int]) -> int:
        return len(lengths) * (len(self.depths) * self.per_context + self.negatives)

    def depth_plan(self) -> list[tuple[float | None, int]]:
        return [(d, self.per_context) for d in self.depths] + [(None, self.negatives)]

    def drafts(self, slot: Slot) -> Iterator[Draft]:
        ids = needle_ids(self.needles)
        k = self.per_context
        for depth in self.depths:
            key = (slot.length, depth, slot.trial)
            sets = self._needle_sets(key)
            inserts: list[Insert] = []
            placed: list[list[dict[str, Any]]] = []
            for j, drawn in enumerate(sets):
                depths = self._needle_depths(drawn, depth, slot.draws("placement", *key, *([j] if j else [])))
                inserts += [Insert(n.text, d) for n, d in zip(drawn.instances, depths, strict=True)]
                placed.append(
                    [
                        {"id": n.needle_id, "index": n.index, "role": n.role, "text": n.text, "depth_requested": d}
                        for n, d in zip(drawn.instances, depths, strict=True)
                    ]
                )
            for j, drawn in enumerate(sets):
                # Every question's context holds every set's needles; another question's are distractors to it.
                needles = [
                    {**n, "role": n["role"] if i == j else "distractor"} for i, ns in enumerate(placed) for n in ns
                ]
                yield Draft(
                    {"depth": depth, "needles": ids, **({"question": j} if k > 1 else {})},
                    Fill(inserts, needles),
                    drawn.question,
                    drawn.expected,
                    drawn.alternates,
                    siblings_ahead=k - 1 - j,
                    question_index=j if k > 1 else None,
                )
        for n in range(self.negatives):
            question = draw_needles(self.needles, slot.draws("negative", slot.length, slot.trial, n)).question
            yield Draft({"negative": n}, Fill([], []), question, negative=True)

    def _needle_sets(self, key: tuple[Any, ...]) -> list[CellNeedles]:
        """The needles of one context: one set per question, each drawn afresh until its question differs from
        the sets' before it (two questions alike could not be told apart)."""
        sets = [draw_needles(self.needles, Draws(self.seed, "needles", *key))]
        for j in range(1, self.per_context):
            for attempt in range(100):
                drawn = draw_needles(self.needles, Draws(self.seed, "needles", *key, j, attempt))
                if all(drawn.question != s.question for s in sets):
                    break
            else:
                raise CompileError(
                    f"grid.questions_per_context is {self.per_context}, but the needles' variables give fewer "
                    "distinct questions: add values to the variables the question names"
                )
            sets.append(drawn)
        return sets

    def _needle_depths(self, drawn: CellNeedles, depth: float, draws: Draws) -> list[float]:
        """Requested depth of every instance: the first at the cell's depth, the rest per `placement`."""
        n = len(drawn.instances)
        if self.placement == "together":
            return [depth] * n
        if self.placement == "random":
            return [depth] + [round(100 * draws.uniform(), 2) for _ in range(n - 1)]
        # The first at the cell's depth as the grid gives it (needlehaystack's sigmoid depths have 3 decimals).
        return [depth] + [round(depth + i * (100 - depth) / n, 2) for i in range(1, n)]


FAMILY = NeedleFamily()
