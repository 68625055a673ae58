"""Compile and plan as the pipeline does them (`nspec.runners.pipeline` gives them too): a spec loaded, its run
directory written or its plan made, and where its requests would go. A module of its own so that `nspec compile`
and `nspec plan` load none of the modules of the stages after them (submit, collect, score, report)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nspec.compiler.haystack import release_tokenised
from nspec.compiler.providers.credentials import Destination, destination
from nspec.compiler.run_writer import DEFAULT_MAX_CELLS, compile_run
from nspec.compiler.run_writer import plan as plan_run
from nspec.runners.grading import calibration
from nspec.spec import LoadedSpec, load_spec, located_cells
from nspec.spec.provenance import describe
from nspec.spec.yamlsource import SourceMap


@dataclass(frozen=True)
class Compiled:
    path: Path
    run_id: str
    created: bool  # False when an identical run directory already existed
    destinations: list[Destination]  # where the run's requests (answers and judges) go, and with which keys
    source: SourceMap | None = None  # where each value of the spec was written (its files and lines)


@dataclass(frozen=True)
class Planned:
    # What `nspec plan --json` prints: the compiler's plan, the cap on cells, where requests go, the provenance.
    plan: dict[str, Any]
    destinations: list[Destination]

    @property
    def cells(self) -> int:
        """The grid's cells, the dropped ones too: what the cap on cells counts."""
        return sum(m["cells"] + m["dropped_cells"] for m in self.plan["models"])

    @property
    def dropped_cells(self) -> int:
        """Cells longer than their model's max_context, dropped (`run.on_too_long: drop`)."""
        return sum(m["dropped_cells"] for m in self.plan["models"])


def compile_spec(
    spec_file: str, out: str | Path = "outputs", allowed: Sequence[str] = (), max_cells: int = DEFAULT_MAX_CELLS
) -> Compiled:
    """Load and validate a spec, and write its run directory under ``out/<name>/<run id>`` (a no-op if it exists).
    The spec reads files under its root only, and under the folders ``allowed``; a grid of more than ``max_cells``
    cells is refused."""
    loaded = load_spec(spec_file, allowed, compiles_next=True)  # compile_run makes the cells the fit check would
    try:
        with located_cells(loaded):
            result = compile_run(
                loaded.data, loaded.base_dir, out, describe(loaded), loaded.confinement, max_cells, loaded.counts
            )
    finally:
        release_tokenised()
    return Compiled(result.path, result.path.name, result.created, destinations(loaded.data), loaded.source)


def plan_spec(loaded: LoadedSpec, max_cells: int = DEFAULT_MAX_CELLS) -> Planned:
    """What compiling a loaded spec would make, nothing written: cells, requests, tokens and estimated cost per model
    and judge, where the requests go, and the spec's provenance. A grid of more than ``max_cells`` cells is
    refused."""
    try:
        with located_cells(loaded):
            planned = plan_run(
                loaded.data, loaded.base_dir, loaded.confinement, max_cells, loaded.counts, calibration.left_to_judges
            )
    finally:
        release_tokenised()
    sends = destinations(loaded.data)
    where = [{"model": d.model, "url": d.url, "host": d.host, "key_variables": list(d.key_variables)} for d in sends]
    return Planned(
        {**planned.as_dict(), "max_cells": max_cells, "destinations": where, "provenance": describe(loaded)}, sends
    )


def destinations(spec: dict[str, Any]) -> list[Destination]:
    """Where a resolved spec's requests go — its models' and its judges' — and which key variable each reads."""
    seen: dict[str, Destination] = {}
    for entry in model_entries(spec):
        found = destination(entry)
        seen.setdefault(found.model, found)
    return list(seen.values())


def model_entries(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The model entries of a resolved spec: its models', then its judges'."""
    entries = list(spec["models"])
    for scorer in spec.get("scoring", []):
        if "judge" in scorer:
            entries += scorer["judge"]["models"]
    return entries
