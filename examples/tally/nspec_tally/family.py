"""The `tally` family: a ledger of deliveries, one line each ("Day 12: 7 crates of plums."), grown to the cell's
length, and the question how many crates of one good arrived in all. The answer is spread over the whole context:
every line of that good counts, not one needle.

A `Sized` draft: the ledger of n lines is built by `build(n)`, and nspec finds the largest n whose prompt fits the
length in the model's tokens. The goods and counts are drawn from the slot's seeded stream, so a spec compiles to
the same bytes every time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from nspec.compiler.tasks import Axis, Built, Detail, Draft, Family, Setup, Sized, Slot, Table, Task

GOODS = ("apples", "pears", "plums", "figs", "limes", "quinces", "dates", "olives")
INSTRUCTIONS = "Below is a harbour's ledger of deliveries, one line per delivery.\n\n"


class TallyFamily(Family):
    name = "tally"
    version = "1"
    params_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "goods": {
                "description": "How many kinds of goods the ledger lists (the question asks about one of them).",
                "type": "integer",
                "minimum": 1,
                "maximum": len(GOODS),
                "default": 3,
            }
        },
    }
    default_scoring = ({"count_error": True},)
    # What the report shows: the kinds of goods as an axis when a spec sweeps them (grid.params), each cell's ledger
    # size and its true total, and a headline table by the kinds of goods.
    axes = (Axis("goods", "Kinds of goods"),)
    details = (Detail("ledger lines", "data.lines"), Detail("true total", "data.total"))
    table = Table("tally", "Tally", "goods")

    def task(self, setup: Setup) -> TallyTask:
        return TallyTask(int(setup.params.get("goods", 3)))


class TallyTask(Task):
    def __init__(self, goods: int) -> None:
        self.goods = GOODS[:goods]

    def cells(self, lengths: Sequence[int]) -> int:
        return len(lengths)  # one cell per length (and model, prompt variant and trial)

    def drafts(self, slot: Slot) -> Iterator[Draft]:
        asked = slot.draws("tally-asked", slot.length, slot.trial).choice(list(self.goods))
        question = f"How many crates of {asked} arrived in all?"

        def build(lines: int) -> Built:
            draws = slot.draws("tally-ledger", slot.length, slot.trial)  # the same ledger, one line longer per size
            entries = [(draws.choice(list(self.goods)), 1 + draws.below(9)) for _ in range(lines)]
            ledger = "\n".join(f"Day {day + 1}: {n} crates of {good}." for day, (good, n) in enumerate(entries))
            total = sum(n for good, n in entries if good == asked)
            text = f"{INSTRUCTIONS}{ledger}\n\n{question} Answer with the number only."
            return Built(text, "", [str(total)], {"lines": lines, "total": total}, question=question)

        yield Draft({"goods": len(self.goods)}, Sized(build, step=5), question)


FAMILY = TallyFamily()
