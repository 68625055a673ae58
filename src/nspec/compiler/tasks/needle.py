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
from . import Draft, Fill, Setup, Slot


class NeedleFamily:
    name = "needle"
    version = "1"
    params_schema: Mapping[str, Any] = {"type": "object", "additionalProperties": False, "properties": {}}
    axes = ("depth",)
    needs_haystack = True
    default_scoring: Sequence[Mapping[str, Any]] = ({"auto": True},)

    def task(self, setup: Setup) -> NeedleTask:
        return NeedleTask(setup)


class NeedleTask:
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
