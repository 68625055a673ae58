"""What a run's task family says its cells are, for the report: the axes they group by beyond model and length (a
needle family's is the depth), what a cell shows beside its question, expected answer and answer, and the family's
headline table. The compiler records it in the manifest (`task.view`, from `Family.view`); for a run compiled before
it did, it is what the installed family declares now, or, for a family no longer installed, its recorded axes.

A cell's value of an axis is its `depth.requested`, `repeat` or `item` field, or its `axes` mapping's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nspec.compiler.tasks import Axis, Detail, Table, registry
from nspec.errors import UserError
from nspec.runners.run_store import Run

DEPTH = "depth"
_FIELDS = {DEPTH: "depth.requested", "repeat": "repeat", "item": "item"}  # axes with a field of their own


@dataclass(frozen=True)
class View:
    axes: tuple[Axis, ...] = ()
    details: tuple[Detail, ...] = ()
    table: Table | None = None

    @property
    def depth(self) -> bool:
        """Whether cells have a depth (a needle placed in a haystack): the heatmap, the depth filter and placement."""
        return any(a.key == DEPTH for a in self.axes)

    def label(self, key: str) -> str:
        return next((a.title for a in self.axes if a.key == key), key)


def view_of(run: Run) -> View:
    """The view the run's manifest records, or, for a run compiled before manifests did, its family's."""
    task: Mapping[str, Any] | None = run.manifest.get("task")
    declared = task.get("view") if task is not None else None
    if declared is None:
        declared = _declared_now(run, task)
    table = declared.get("table")
    return View(
        tuple(Axis(a["key"], a["label"]) for a in declared.get("axes", [])),
        tuple(Detail(d["label"], d["field"]) for d in declared.get("details", [])),
        Table(table["name"], table["title"], table["axis"]) if table else None,
    )


def _declared_now(run: Run, task: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The view the run's family declares now; its recorded axes alone where it is no longer installed."""
    try:
        family = registry.family(task["name"] if task is not None else registry.named(run.spec))
    except UserError:
        axes = task["axes"] if task is not None else []
        return {"axes": [{"key": key, "label": Axis(key).title} for key in axes], "details": [], "table": None}
    return family.view(list(registry.sweeps(run.spec)))


def axis_value(cell: Mapping[str, Any], key: str) -> Any:
    """The cell's value of the axis ``key`` (None where it has none)."""
    return field_value(cell, _FIELDS.get(key, f"axes.{key}"))


def field_value(record: Mapping[str, Any], dotted: str) -> Any:
    """The value at a dotted path of a record (None where there is none)."""
    value: Any = record
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def text(value: Any) -> str:
    """An axis value as the page writes it, and the browser's filters compare it: a number without a needless
    ".0", a text as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value, ensure_ascii=False)


def sort_key(value: str) -> tuple[int, float, str]:
    """Numbers in order of size, then texts in order."""
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)
