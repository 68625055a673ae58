"""One cell's record (its cells.jsonl line) and request line, for every kind of context: what is the same for all
of them is made here once, what differs comes in the draft's `Fitted`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nspec.errors import CompileError
from nspec.prompt import Prompt

from .fit.measure import Fitted
from .models import Model, ModelSlot, cell_id
from .tasks import Draft

# Keys of a cell's identity that are the framework's: a family's drafts may not use them.
FRAMEWORK_KEYS = frozenset(("model", "variant", "length", "trial", "params"))
# The identity keys that have fields of their own in a cell's record; a family's other axes go in `axes`.
RECORDED_AXES = ("depth", "repeat", "item")


@dataclass
class Cell:
    record: dict[str, Any]  # the cells.jsonl line
    request: dict[str, Any] | None  # the provider batch input line (None where a plan counts without building)
    model: Model
    composed: int | None = None  # the count composed from the provider's counts (calibrate checks it)
    opens_group: tuple[int, int] | None = None  # first of a cache group: the group's forecast requests and bytes


@dataclass(frozen=True)
class Records:
    """How a compile names its cells and writes their records: the family's name and axes, whether `grid.params`
    sweeps (the point is then part of the identity), and whether request lines are built (a plan counts only)."""

    family: str
    axes: tuple[str, ...]
    swept: bool
    requests: bool

    def identity(self, slot: ModelSlot, draft: Draft) -> dict[str, Any]:
        """The cell's whole identity but its model: the framework's keys and the family's."""
        clash = FRAMEWORK_KEYS & set(draft.identity)
        if clash:
            raise CompileError(
                f"the {self.family} task family gives its drafts the identity key(s) {', '.join(sorted(clash))}, "
                "which are the framework's"
            )
        point = {"params": slot.point} if self.swept else {}
        return {"variant": slot.variant, "length": slot.length, "trial": slot.trial, **point, **draft.identity}

    def cell_id(self, slot: ModelSlot, draft: Draft) -> str:
        return cell_id(slot.model, self.identity(slot, draft))

    def request(self, slot: ModelSlot, cid: str, prompt: Prompt, reserve: int) -> dict[str, Any] | None:
        """The cell's request line, where it is needed: in a compile, or to look up the provider's counts."""
        model = slot.model
        if not self.requests and model.counter is None:
            return None
        return model.api.request_line(model.entry, cid, prompt, model.params, reserve)

    def cell(self, slot: ModelSlot, draft: Draft, fitted: Fitted) -> Cell:
        """The fitted draft's cell: its record, and its request line (built here unless fitting built it)."""
        model = slot.model
        identity = self.identity(slot, draft)
        cid = cell_id(model, identity)
        request = (
            fitted.request if fitted.request is not None else self.request(slot, cid, fitted.prompt, fitted.reserve)
        )
        needles = fitted.needles
        axes = {a: draft.identity[a] for a in self.axes if a in draft.identity and a not in RECORDED_AXES}
        axes.update(slot.point)
        record = {
            "cell_id": cid,
            "model": model.label,
            "model_id": model.model_id,
            "prompt": slot.variant,
            "context_length": {
                "target": slot.length,
                "actual": fitted.tokens + fitted.reserve,
                "prompt": fitted.tokens,
                "haystack": fitted.haystack_tokens,
                "o200k": fitted.reference_tokens,
                "characters": sum(len(t) for t in fitted.prompt.texts()),
                **fitted.counted,
            },
            "tokens_exact": fitted.exact,
            "depth": {"requested": identity.get("depth"), "actual": needles[0]["depth_actual"] if needles else None},
            "trial": slot.trial,
            "repeat": identity.get("repeat"),
            "item": identity.get("item"),
            "needles": needles,
            "question": fitted.question,
            "expected": fitted.expected,
            "alternates": draft.alternates,
            "negative": draft.negative,
            "max_tokens": model.max_tokens(fitted.reserve),
            "haystack_uses": fitted.haystack_uses,
            **({"axes": axes} if axes else {}),
            **({"data": fitted.data} if fitted.data else {}),
            **fitted.extra,
        }
        return Cell(record, request, model, fitted.composed, fitted.opens_group)
