"""Task families: each turns a spec's parameters, seeded draws and a target length into drafts of cells.

A family is a subclass of `Family` (`tasks.family`): given the spec (its parameters at one point of `grid.params`,
the haystack it reads, if any), it makes a `Task`, which yields the drafts (`tasks.drafts`) of one slot — one model,
prompt variant, context length and trial — each with its identity (what makes its cell id), its question, expected
answers, data for the scorers and the report, and its context: `Fill`, `Sized` (built with `Built`, sized by
`tasks.sizing`) or `Fixed`.

Everything after the draft — fitting, request lines, caching, sharding, running, grading, reports — is one code path
for every family (`compiler.compilation`). Every family, nspec's own included, comes through the `nspec.tasks`
entry-point group (`tasks.registry`), never from code a spec names. This package's names are the interface a third
party writes against.
"""

from .drafts import Draft, Fill, Fixed, Sized, SizeSearch
from .family import (
    DEPTH,
    FAMILY_SECTIONS,
    Axis,
    Detail,
    Family,
    ParamError,
    PlacingTask,
    Setup,
    Slot,
    SpecChecks,
    Table,
    Task,
)
from .sizing import Built, largest_fitting, largest_within

__all__ = [
    "DEPTH",
    "FAMILY_SECTIONS",
    "Axis",
    "Built",
    "Detail",
    "Draft",
    "Family",
    "Fill",
    "Fixed",
    "ParamError",
    "PlacingTask",
    "Setup",
    "SizeSearch",
    "Sized",
    "Slot",
    "SpecChecks",
    "Table",
    "Task",
    "largest_fitting",
    "largest_within",
]
