"""Task families: each turns a spec's parameters, seeded draws and a target length into drafts of cells.

A family is one module behind one small interface (`Family`): given the spec (its parameters at one point of
`grid.params`, the haystack it reads, if any), it makes a `Task`, which yields the drafts of one slot — one model,
prompt variant, context length and trial — each with its identity (what makes its cell id), its question, expected
answers, data for the scorers and the report, and its context, in one of three kinds:

- `Fill`: the haystack cut to the length with inserts at depths (needles, stack items) — the framework fits it to
  the model's tokens exactly (`compiler.context`);
- `Sized`: a pure `build(size)`, monotone in the size; the framework finds the largest size on the family's step whose
  prompt and answer budget fit the length in the model's tokens (RULER's way: `largest_fitting`);
- `Fixed`: a prompt the family brings whole (a dataset row, a conversation), placed at the smallest grid length it
  fits.

Everything after the draft — fitting, request lines, caching, sharding, running, grading, reports — is one code path
for every family (`compiler.cells`). The built-in families are `needle` (`tasks.needle`) and `stack`
(`tasks.stack`); others come from installed packages through the `nspec.tasks` entry-point group
(`tasks.registry`), never from code a spec names.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from nspec.errors import UserError
from nspec.inputs import Confinement, read_input
from nspec.prompt import Turn

from ..context import Insert
from ..draws import Draws

if TYPE_CHECKING:
    from nspec.inputs import Confinement

    from ..haystack import HaystackSource
    from .ruler.base import Built  # what a sized build returns (RULER's generators return it too)


@dataclass(frozen=True)
class Fill:
    """A haystack cut to the cell's length, with ``inserts`` at their depths; ``needles`` describe them, one record
    per insert (id, index, role, text, depth_requested), and get each insert's actual depth once it is placed."""

    inserts: list[Insert]
    needles: list[dict[str, Any]]


@dataclass(frozen=True)
class SizeSearch:
    """RULER's way to a size (since 2025-06): the largest size on the grid ``first``, ``first + step``, ... at
    which the sample ``build`` makes fits, searched once per model, prompt, length and task."""

    build: Callable[[int], Built]
    first: int
    step: int = 1


@dataclass(frozen=True)
class Sized:
    """A context the family generates at a size: ``build(size)`` is pure and grows with ``size``. A size *fits* when
    the prompt — ``Built.history``'s turns then ``Built.text`` as the last user turn, its answer prefix as the
    prefill — plus the answer budget (``reserve`` where the family sets one, else the prompt's `reserve_tokens`) is
    within the length. The cell gets:

    - without ``search``: the largest multiple of ``step`` (up to ``limit``) that fits;
    - with ``search`` (RULER's rule): the size searched once (up to ``limit``), less ``step`` while this sample
      does not fit there.
    """

    build: Callable[[int], Built]
    step: int = 1
    limit: int | None = None
    reserve: int | None = None  # the answer budget the family sets (RULER's tokens to generate): the cell's reserve
    search: SizeSearch | None = None


@dataclass(frozen=True)
class Fixed:
    """A prompt the family brings whole: ``turns`` (user and assistant alternating, ending with a user turn) and
    an answer ``prefix`` for the model to continue. Its cell is made at the smallest grid length it fits; one that
    fits none is dropped and counted (the manifest's fallbacks say so)."""

    turns: tuple[Turn, ...]
    prefix: str | None = None


@dataclass
class Draft:
    """A cell before its context is fitted.

    ``identity`` holds the family's keys of the cell (depth, item, hops, ...): with the model, prompt variant,
    length, trial and grid.params point it makes the cell id, so it must tell apart every cell of a slot and never
    change for the same cell. ``expected`` are the answers the scorers look for (all of them, where the scorer says
    so: `string_match_all`, several needles' values), ``alternates`` other accepted answers; ``data`` is the
    family's per-cell data for scorers (`GradeInput.data`) and the report. A `Sized` draft's expected answers and
    data come from what its build gives, added to these.
    """

    identity: dict[str, Any]
    context: Fill | Sized | Fixed
    question: str
    expected: list[str] = field(default_factory=list)
    alternates: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    negative: bool = False  # a control with nothing to find: the right answer is "not found"
    # Several questions asked of one context (Fill): how many of them are still to come after this one, and which
    # of the context's questions this is (None: the only one).
    siblings_ahead: int = 0
    question_index: int | None = None


class ParamError(UserError):
    """A family's parameter that cannot be used as given (a data file that is not of its shape, a count that cannot
    be, a parameter none of the spec's tasks takes): ``key`` is where it stands under `task.params`, ``point`` the
    point of `grid.params` the task was made at (set by the compiler), so `nspec validate` locates it as it locates
    the spec's own errors."""

    def __init__(self, key: tuple[str | int, ...], message: str) -> None:
        self.key = key
        self.point: dict[str, Any] = {}
        super().__init__(message)


@dataclass(frozen=True)
class Setup:
    """What a family's task is made from: the resolved spec (read only), the family's parameters at one point of
    `grid.params`, and the haystack when the family reads one. A family reads a file its parameters name only through
    `read`: relative to the spec's folder, inside its confinement, and counted into the compile hash."""

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
        path = os.path.join(self.base_dir, name)
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


class Task(Protocol):
    """A family bound to one spec and one point of its parameters."""

    def cells(self, lengths: Sequence[int]) -> int:
        """How many drafts one model, prompt variant and trial get over ``lengths``, by arithmetic (nothing is
        built): what the cell cap is checked against before any work."""
        ...

    def drafts(self, slot: Slot) -> Iterator[Draft]:
        """The drafts of one slot, in a fixed order; the questions asked of one context (Fill) one after another."""
        ...

    def depth_plan(self) -> list[tuple[float | None, int]]:
        """Fill tasks: the depth of each slot's first insert and how many cells put it there (None: cells without
        an insert), so the prompt cache can be planned before the cells are made. Others: []."""
        ...

    # Optional attributes: ``haystack``, a variant of the spec's haystack its Fill drafts are cut from (e.g.
    # sentence-shuffled; tokenised once beside the spec's); ``inputs_digest``, a digest of what it read from files its
    # parameters name, which enters the compile hash.


class Family(Protocol):
    """A kind of task, found by name in the registry (`tasks.registry`)."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str:
        """Enters the compile hash of a spec that names the family: a family that changes what it makes says so."""
        ...

    @property
    def params_schema(self) -> Mapping[str, Any]:
        """The JSON Schema of its `task.params` (draft 2020-12); errors are located like the spec's own."""
        ...

    @property
    def axes(self) -> tuple[str, ...]:
        """Keys of its drafts' identities the report groups by (besides model and length); `grid.params` sweeps are
        axes too."""
        ...

    @property
    def needs_haystack(self) -> bool:
        """Whether its drafts are `Fill` (a haystack, needles or stack items); otherwise `Sized` or `Fixed`."""
        ...

    @property
    def default_scoring(self) -> Sequence[Mapping[str, Any]]:
        """The scorers of a spec that names none (e.g. `[{string_match_all: {}}]` for RULER's tasks)."""
        ...

    def task(self, setup: Setup) -> Task:
        """The family's task at one point of `grid.params`. What it refuses of its parameters beyond their schema
        (a data file not of its shape, a count its data cannot meet, a parameter none of the spec's tasks takes) it
        raises here, as a `ParamError` at the parameter: `nspec validate`, `plan` and `compile` all make the task at
        every point before any cell (`nspec.spec.checks.family_fit`), so they refuse alike, located. Keep it cheap:
        validate makes it too."""
        ...

    # Optional: ``path_params``, parameters that are file paths relative to the spec file that writes them (an
    # included spec's are rebased as its haystack files are); ``data_files(points, base_dir)``, the files its tasks
    # read, listed in the manifest's provenance.
