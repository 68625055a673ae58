"""The `stack` family: needle in a needlestack (NIAN). The haystack is a stack of items; each question's item is
placed at the grid's locations (`depths`), `repeats` times in a row, among the filler items; several questions may
be asked of one context holding all their items. What a spec with `haystack: {stack: ...}` and no `task:` runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .. import grid as grid_axes
from ..context import Insert
from ..draws import Draws
from ..haystack import HaystackSource, StackQuestion
from . import DEPTH, Axis, Draft, Family, Fill, PlacingTask, Setup, Slot, SpecChecks


class StackFamily(Family):
    name = "stack"
    haystack_kind = "stack"
    sections = (("grid", "repeats"), ("grid", "questions_per_context"))
    axes = (DEPTH, Axis("repeat", "Repeats"))

    def task(self, setup: Setup) -> StackTask:
        assert setup.source is not None and setup.source.kind == "stack"
        return StackTask(setup, setup.source)

    def check(self, spec: Mapping[str, Any], checks: SpecChecks) -> None:
        haystack = spec.get("haystack")
        if not isinstance(haystack, dict) or "stack" not in haystack:
            return
        if haystack.get("boundary") == "period-token":
            checks.error(("haystack", "boundary"), "a stack is cut between its items: `period-token` is for text")
        separator = haystack.get("separator")
        if isinstance(separator, str) and not separator.endswith("\n"):
            checks.error(
                ("haystack", "separator"),
                "a stack's separator must end with a newline, so that the stack is cut between items exactly "
                '(the default is a blank line, "\\n\\n")',
            )


class StackTask(PlacingTask):
    def __init__(self, setup: Setup, source: HaystackSource) -> None:
        self.source = source
        self.seed = setup.seed
        self.depths = grid_axes.depths(setup.grid["depths"])
        self.repeats: list[int] = setup.grid.get("repeats", [1])
        self.per_context: int = setup.grid.get("questions_per_context", 1)
        self.negatives = setup.negatives
        self.per_trial: int | None = setup.spec["haystack"]["stack"].get("questions_per_trial")

    def questions(self) -> int:
        """How many of the stack's questions each trial asks."""
        asked = len(self.source.questions)
        return asked if self.per_trial is None else min(asked, self.per_trial)

    def cells(self, lengths: Sequence[int]) -> int:
        return len(lengths) * (len(self.depths) * len(self.repeats) * self.questions() + self.negatives)

    def depth_plan(self) -> list[tuple[float | None, int]]:
        per_depth = len(self.repeats) * self.questions()
        return [(d, per_depth) for d in self.depths] + [(None, self.negatives)]

    def drafts(self, slot: Slot) -> Iterator[Draft]:
        questions: list[StackQuestion] = self.source.questions
        if self.per_trial is not None and self.per_trial < len(questions):
            questions = Draws(self.seed, "questions", slot.trial).sample(questions, self.per_trial)
        k = self.per_context
        chunks = [questions[i : i + k] for i in range(0, len(questions), k)]
        items = self.source.items
        for depth in self.depths:
            for repeat in self.repeats:
                for chunk in chunks:
                    inserts = [Insert(items[q.item], depth, repeat) for q in chunk]
                    for j, q in enumerate(chunk):
                        needles = [
                            {
                                "id": other.item,
                                "index": 0,
                                "role": "target" if other is q else "distractor",
                                "text": items[other.item],
                                "depth_requested": depth,
                            }
                            for other in chunk
                        ]
                        yield Draft(
                            {"depth": depth, "repeat": repeat, "item": q.item},
                            Fill(inserts, needles),
                            q.question,
                            [q.answer],
                            list(q.alternates),
                            siblings_ahead=len(chunk) - 1 - j,
                            question_index=j if k > 1 else None,
                        )
        for n in range(self.negatives):
            question = slot.draws("negative", slot.length, slot.trial, n).choice(self.source.questions).question
            yield Draft({"negative": n}, Fill([], []), question, negative=True)


FAMILY = StackFamily()
