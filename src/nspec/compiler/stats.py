"""What a compile counts as it goes, per model, for the manifest and the plan: what it did in place of what the
spec asked (cells dropped, prompts placed at no length, haystacks repeated, counts estimated), said there once."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .haystack import SourceUse


@dataclass
class CompileStats:
    """Per model label: each counter a `Counter` of cells (or needles), bumped as the cells are made."""

    use: SourceUse  # how often each haystack source appears within a cell
    dropped: Counter[str] = field(default_factory=Counter)  # cells of lengths beyond max_context (`on_too_long: drop`)
    unplaced: Counter[str] = field(default_factory=Counter)  # `Fixed` drafts that fit no grid length
    redrawn: Counter[str] = field(default_factory=Counter)  # generated cells a family drew again (`Built.redrawn`)
    short: Counter[str] = field(default_factory=Counter)  # generated cells at their family's largest size (`limit`)
    shortest: dict[str, int] = field(default_factory=dict)  # the fewest prompt tokens among those
    repeating: Counter[str] = field(default_factory=Counter)  # cells whose haystack holds a source more than once
    capped: Counter[str] = field(default_factory=Counter)  # cells shortened to keep a proxy's margin in max_context
    far: Counter[str] = field(default_factory=Counter)  # needles more than FAR_FROM_DEPTH points from their depth
    uncounted: Counter[str] = field(default_factory=Counter)  # calibrated: cells the counts file has no counts for
    inexact: Counter[str] = field(default_factory=Counter)  # calibrated: cells counted by a composition it refuted
    # Per encoding: tokens of one pass over the haystack's sources, where a whole pass was tokenised.
    pass_tokens: dict[str, int] = field(default_factory=dict)
