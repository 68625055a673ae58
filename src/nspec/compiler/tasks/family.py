"""The family protocol: what a task family declares, what it is made from, and what its tasks answer.

A family is a subclass of `Family`, registered through the `nspec.tasks` entry-point group (`tasks.registry`). Its
declarations say everything the framework needs of it — its parameters' schema, the spec sections it reads and their
checks, the axes its cells vary on and how a cell is shown — so that validating, compiling, grading and reporting
name no family. What it makes is a `Task` per point of `grid.params`, which yields the drafts of each slot.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from nspec.datasets import path_of
from nspec.errors import UserError
from nspec.inputs import Confinement, read_input

from ..draws import Draws
from .drafts import Draft

if TYPE_CHECKING:
    from ..haystack import HaystackSource

Path = tuple[str | int, ...]


class ParamError(UserError):
    """A family's parameter that cannot be used as given (a data file that is not of its shape, a count that cannot
    be, a parameter none of the spec's tasks takes): ``key`` is where it stands under `task.params`, ``point`` the
    point of `grid.params` the task was made at (set by the compiler), so `nspec validate` locates it as it locates
    the spec's own errors."""

    def __init__(self, key: Path, message: str) -> None:
        self.key = key
        self.point: dict[str, Any] = {}
        super().__init__(message)


@dataclass(frozen=True)
class Setup:
    """What a family's task is made from: the resolved spec (read only), the family's parameters at one point of
    `grid.params`, and the haystack when the family reads one. A family reads a file its parameters name only through
    `read`: relative to the spec's folder (or a data set's, `data:...`), inside its confinement, and counted into the
    compile hash."""

    spec: Mapping[str, Any]
    params: Mapping[str, Any]
    source: HaystackSource | None
    seed: int
    base_dir: str = "."  # where the files its parameters name are, relative to (the spec's folder)
    confinement: Confinement | None = None  # the folders those files must lie in
    files: list[dict[str, Any]] = field(default_factory=list)  # every file read: name, bytes, sha256

    def read(self, key: str, limit: int) -> bytes:
        """The bytes of the file the parameter ``key`` names; a `ParamError` at that key when it cannot be read."""
        name = str(self.params[key])
        try:
            path = path_of(name, self.base_dir)
        except UserError as exc:
            raise ParamError((key,), str(exc)) from None
        outside = self.confinement.problem(path) if self.confinement is not None else None
        if outside is not None:
            raise ParamError((key,), f"{name} {outside}")
        try:
            data = read_input(path, limit)
        except UserError as exc:
            raise ParamError((key,), str(exc).replace(path, name, 1)) from None
        self.files.append({"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        return data

    @property
    def grid(self) -> Mapping[str, Any]:
        grid: Mapping[str, Any] = self.spec["grid"]
        return grid

    @property
    def negatives(self) -> int:
        """Negative controls per slot (`grid.negative_controls`)."""
        said = self.grid.get("negative_controls", False)
        return int(said) if not isinstance(said, bool) else (1 if said else 0)


@dataclass(frozen=True)
class Slot:
    """What every cell of one model, prompt variant, length and trial shares, as a family sees it."""

    variant: str | None
    length: int
    trial: int
    seed: int
    count: Callable[[str], int] | None = None  # a text's tokens as the slot's model counts them

    def draws(self, *key: Any) -> Draws:
        """The seeded random stream of ``key`` (with the spec's seed): the same key, the same draws, forever."""
        return Draws(self.seed, *key)


class Task:
    """A family bound to one spec and one point of its parameters."""

    # A variant of the spec's haystack its Fill drafts are cut from (e.g. sentence-shuffled), tokenised once beside
    # the spec's; None: the spec's own.
    haystack: HaystackSource | None = None
    # A digest of what it read from files its parameters name other than through `Setup.read` (which counts itself):
    # it enters the compile hash, so a changed file is another run.
    inputs_digest: str | None = None

    def cells(self, lengths: Sequence[int]) -> int:
        """How many drafts one model, prompt variant and trial get over ``lengths``, by arithmetic (nothing is
        built): what the cell cap is checked against before any work."""
        raise NotImplementedError

    def drafts(self, slot: Slot) -> Iterator[Draft]:
        """The drafts of one slot, in a fixed order; the questions asked of one context (Fill) one after another."""
        raise NotImplementedError


class PlacingTask(Task):
    """A task whose drafts are `Fill`: inserts placed in a haystack at depths."""

    def depth_plan(self) -> list[tuple[float | None, int]]:
        """The depth of each slot's first insert and how many cells put it there (None: cells without an insert),
        so the prompt cache can be planned before the cells are made."""
        raise NotImplementedError


@dataclass(frozen=True)
class Axis:
    """A key of the cells' identities the report groups by, besides model and length, with its name in tables."""

    key: str
    label: str = ""

    @property
    def title(self) -> str:
        return self.label or self.key.replace("_", " ").capitalize()


# Where a Fill family's first insert goes: its cells' `depth`.
DEPTH = Axis("depth", "Depth (%)")


@dataclass(frozen=True)
class Detail:
    """Something a cell shows beside its question, expected answer and reply: ``field`` is a dotted path into its
    cells.jsonl record (`data.edges`)."""

    label: str
    field: str


@dataclass(frozen=True)
class Table:
    """A family's headline table: per model and length, the score of each value of ``axis`` averaged over the values
    (each weighs the same), with the averages and the effective length; written as `report/<name>.md` and `.json`."""

    name: str
    title: str
    axis: str


class SpecChecks(Protocol):
    """What a family's `check` reports through: `nspec validate` locates each issue at its key path."""

    def error(self, path: Path, message: str, *, at_key: bool = False) -> None: ...

    def template(self, path: Path, text: Any, allowed: set[str], what: str) -> dict[str, int] | None:
        """Check one template: parsable, every placeholder in ``allowed``; its placeholders' counts (None when it
        is not a text or cannot be read)."""
        ...


# The spec's sections that belong to a family: a spec gives one only when its family reads it (`Family.sections`).
FAMILY_SECTIONS: tuple[Path, ...] = (
    ("needles",),
    ("placement",),
    ("grid", "repeats"),
    ("grid", "questions_per_context"),
)


class Family:
    """A kind of task, found by name in the registry. Subclass it and override what differs from the defaults."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"  # enters the compile hash of a spec that names the family: say when output changes
    # The JSON Schema of its `task.params` (draft 2020-12, self-contained); errors are located like the spec's own.
    params_schema: ClassVar[Mapping[str, Any]] = {"type": "object", "additionalProperties": False, "properties": {}}
    # What its drafts are cut from: a text haystack (corpus, files, noise), a stack of items, or nothing (its drafts
    # are `Sized` or `Fixed`).
    haystack_kind: ClassVar[Literal["text", "stack"] | None] = None
    # The sections of `FAMILY_SECTIONS` it reads (besides `task.params`); `check` checks them.
    sections: ClassVar[tuple[Path, ...]] = ()
    # Parameters that name files, relative to the spec file that writes them (where an included file writes one, in
    # `task.params` or a `grid.params` sweep, the loader rebases it), and the values of them that name no file but
    # something the family ships (NoLiMa's `builtin` set): never rebased.
    path_params: ClassVar[tuple[str, ...]] = ()
    built_in_names: ClassVar[frozenset[str]] = frozenset()
    # The scorers of a spec that names none (e.g. `[{string_match_all: {}}]` for RULER's tasks).
    default_scoring: ClassVar[Sequence[Mapping[str, Any]]] = ({"auto": True},)
    # What the report groups its cells by (a `grid.params` sweep is an axis too), what a cell shows, and its headline
    # table.
    axes: ClassVar[tuple[Axis, ...]] = ()
    details: ClassVar[tuple[Detail, ...]] = ()
    table: ClassVar[Table | None] = None

    @property
    def needs_haystack(self) -> bool:
        """Whether its drafts are `Fill` (cut from a haystack); otherwise `Sized` or `Fixed`."""
        return self.haystack_kind is not None

    def task(self, setup: Setup) -> Task:
        """The family's task at one point of `grid.params`. What it refuses of its parameters beyond their schema
        (a data file not of its shape, a count its data cannot meet, a parameter none of the spec's tasks takes) it
        raises here, as a `ParamError` at the parameter: `nspec validate`, `plan` and `compile` all make the task at
        every point before any cell, so they refuse alike, located. Keep it cheap: validate makes it too."""
        raise NotImplementedError

    def check(self, spec: Mapping[str, Any], checks: SpecChecks) -> None:
        """Cross-checks of the sections it reads that their schema cannot express (`nspec validate`); the spec is
        merged but may hold values of the wrong type, which the schema reports: look only at values of the right
        type."""

    def data_files(self, points: Sequence[Mapping[str, Any]], base_dir: str) -> list[str]:
        """The files its tasks read at ``points`` of `grid.params`, for the manifest's provenance: by default, those
        its path parameters name."""
        named = (str(p[k]) for p in points for k in self.path_params if k in p)
        paths = (os.path.normpath(path_of(v, base_dir)) for v in named if v not in self.built_in_names)
        return list(dict.fromkeys(paths))

    def view(self, sweeps: Sequence[str]) -> dict[str, Any]:
        """How the report shows its cells (the manifest's `task.view`): its axes then the swept parameters, the
        details of a cell, its headline table."""
        axes = [*self.axes, *(Axis(key) for key in sweeps if key not in {a.key for a in self.axes})]
        return {
            "axes": [{"key": a.key, "label": a.title} for a in axes],
            "details": [{"label": d.label, "field": d.field} for d in self.details],
            "table": None if self.table is None else dataclasses.asdict(self.table),
        }


def family_problem(name: str, loaded: Any) -> str | None:
    """Why an object registered as a task family is not one (None when it is)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    if not isinstance(loaded, Family):
        return "is not a task family: its object must be an instance of a subclass of nspec.compiler.tasks.Family"
    if getattr(loaded, "name", None) != name:
        return f"calls itself {getattr(loaded, 'name', None)!r}"
    try:
        Draft202012Validator.check_schema(loaded.params_schema)
    except SchemaError as exc:
        return f"declares a params_schema that is not a JSON Schema: {exc.message}"
    unknown = [s for s in loaded.sections if s not in FAMILY_SECTIONS]
    if unknown:
        return f"reads sections nspec does not have: {', '.join('.'.join(map(str, s)) for s in unknown)}"
    return None
