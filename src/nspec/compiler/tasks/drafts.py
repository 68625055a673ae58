"""What a family's task makes: drafts of cells, each with its context in one of three kinds.

- `Fill`: the haystack cut to the length with inserts at depths (needles, stack items) — the framework fits it to
  the model's tokens exactly (`compiler.fit.fill`);
- `Sized`: a pure `build(size)`, monotone in the size; the framework finds the largest size on the family's step
  whose prompt and answer budget fit the length in the model's tokens (`compiler.fit.sized`);
- `Fixed`: a prompt the family brings whole (a dataset row, a conversation), placed at the smallest grid length it
  fits (`compiler.fit.fixed`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nspec.prompt import Turn

from ..context import Insert
from .sizing import Built


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
    change for the same cell. ``question`` is the question as the prompt asks it (a `Sized` build may give it more
    exactly: `Built.question`). ``expected`` are the answers the scorers look for (all of them, where the scorer
    says so: `string_match_all`, several needles' values), ``alternates`` other accepted answers; ``data`` is the
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
