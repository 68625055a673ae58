"""`nspec calibrate`: the provider's own token counts of what a spec's cells need, asked of its free count-tokens
endpoint and kept beside the spec (`<spec>.counts.json`, versioned with it), so that `compile` fits and counts
those models' cells exactly without calling anything.

The compiler does the asking: it is run with a `Counter` whose fetch calls the endpoint (`compiler.counts_file`), so the
counts asked are exactly those a compile then looks up, and a compile with the file finds every one. Counts already
in the file are reused. Composed counts are checked against whole-cell counts on a few cells per model (the first
cell of the shortest and of the longest length, the first whose needle follows the last sentence, the first
negative control); where any disagrees, every cell of that model is counted whole.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nspec.compiler.compilation import Mode
from nspec.compiler.counts_file import CountsFile, ModelCounts
from nspec.compiler.providers.credentials import credentials
from nspec.compiler.providers.io import TokenCounter
from nspec.compiler.providers.registry import provider
from nspec.compiler.record import Cell
from nspec.compiler.run_writer import DEFAULT_MAX_CELLS, prepare
from nspec.errors import ProviderError, writing
from nspec.events import Event, Listener, ignore
from nspec.spec import load_spec, located_cells
from nspec.spec.loader import counts_file

ATTEMPTS = 6  # per count: rate limits and server errors are waited out, as the provider says or with backoff


@dataclass
class ModelCalibration:
    """What calibrating one model did."""

    model: str
    counted_by: str = ""
    cells: int = 0
    asked: int = 0  # counts asked of the provider now
    reused: int = 0  # counts the file already had
    composition: str = "unchecked"
    checked: int = 0  # cells whose composed count was checked against a whole count
    disagreed: list[str] = field(default_factory=list)  # "cell: composed N, whole M"
    skipped: str = ""  # why the model was not calibrated


@dataclass
class Calibration:
    path: str
    models: list[ModelCalibration]


class _Asker:
    """One model's count-tokens calls, counted, with rate limits and server errors waited out."""

    def __init__(self, client: TokenCounter, report: ModelCalibration, events: Listener) -> None:
        self.client, self.report, self.events = client, report, events

    def __call__(self, body: dict[str, Any]) -> int:
        for attempt in range(ATTEMPTS):
            try:
                found = self.client.count(body)
                break
            except ProviderError as exc:
                if attempt == ATTEMPTS - 1:
                    raise
                wait = getattr(exc, "retry_after", None) or min(30.0, 2.0**attempt)
                self.events(Event("count-wait", stage="calibrate", delay=wait, detail=f"{self.report.model}: {exc}"))
                time.sleep(wait)
        self.report.asked += 1
        self.events(Event("counted", stage="calibrate", detail=self.report.model))
        return found


def calibrate(
    spec_file: str,
    allowed: Sequence[str] = (),
    only: Sequence[str] = (),
    events: Listener = ignore,
    max_cells: int = DEFAULT_MAX_CELLS,
    counters: dict[str, TokenCounter] | None = None,
) -> Calibration:
    """Ask the providers of ``spec_file``'s models (those in ``only``, when given) for the counts its cells need,
    and write them beside it. Models whose provider has no count-tokens endpoint are left as they are (said).
    ``counters`` replaces a model's endpoint (by model id), as a transport is replaced in tests."""
    loaded = load_spec(spec_file, allowed)
    counts = loaded.counts or CountsFile()
    reports: dict[str, ModelCalibration] = {}
    askers: dict[str, _Asker] = {}
    for entry in loaded.data["models"]:
        model_id = entry["id"]
        report = reports.setdefault(model_id, ModelCalibration(model_id))
        api = provider(model_id.split("/", 1)[0])
        if only and model_id not in only and entry.get("name") not in only:
            report.skipped = "not asked for (--model)"
        elif not api.counts_tokens:
            report.skipped = f"{api.name} has no count-tokens endpoint: its counts stay {api.token_counts}"
        elif model_id not in askers:
            report.counted_by = f"{api.name} count_tokens"
            known = counts.models.setdefault(model_id, ModelCounts(report.counted_by))
            known.composition = "unchecked"  # checked again below
            client = (counters or {}).get(model_id) or api.token_counter(credentials(entry))
            askers[model_id] = _Asker(client, report, events)
    if askers:
        with located_cells(loaded):
            samples = _count_cells(loaded, counts, askers, max_cells, reports)
            _verify(samples, counts, reports)
            rejected = {m for m in askers if counts.models[m].composition == "rejected"}
            if rejected:
                _count_cells(loaded, counts, {m: askers[m] for m in rejected}, max_cells, reports, whole=True)
    for model_id in askers:
        reports[model_id].reused = max(0, len(counts.models[model_id].counts) - reports[model_id].asked)
    path = counts_file(spec_file)
    _write(path, counts)
    return Calibration(path, list(reports.values()))


def _count_cells(
    loaded: Any,
    counts: CountsFile,
    askers: dict[str, _Asker],
    max_cells: int,
    reports: dict[str, ModelCalibration],
    whole: bool = False,
) -> dict[str, list[Cell]]:
    """One compile asking for every count it needs (and, ``whole``, each cell's whole count); the cells to verify
    composition on, per model. The counts kept are exactly those used."""
    compilation, _ = prepare(
        loaded.data, loaded.base_dir, loaded.confinement, max_cells, Mode.COMPILE, counts, dict(askers)
    )
    samples: dict[str, dict[str, Cell]] = {m: {} for m in askers}
    lengths = compilation.lengths
    for cell in compilation.cells():
        model_id = cell.model.model_id
        if model_id not in askers or cell.model.counter is None:
            continue
        assert cell.request is not None  # a counted cell carries its line: counts are looked up by it
        if whole:
            cell.model.counter.line(cell.request)
            continue
        reports[model_id].cells += 1
        if cell.composed is None:
            continue  # a task's whole prompt (Sized, Fixed), counted whole: no composition to verify
        record, chosen = cell.record, samples[model_id]
        target = record["context_length"]["target"]
        needle_at_end = any(n["depth_requested"] >= 100 for n in record["needles"])
        for kind, wanted in (
            ("shortest", not record["negative"] and target == lengths[0]),
            ("longest", not record["negative"] and target == lengths[-1]),
            ("after the last sentence", needle_at_end),
            ("negative control", record["negative"]),
        ):
            if wanted:
                chosen.setdefault(kind, cell)
    if not whole:  # keep what this compile used: counts of an earlier version of the spec go
        for model in compilation.models:
            if model.counter is not None and model.model_id in askers:
                known = counts.models[model.model_id]
                known.counts = {k: known.counts[k] for k in model.counter.used}
    return {m: list(chosen.values()) for m, chosen in samples.items()}


def _verify(samples: dict[str, list[Cell]], counts: CountsFile, reports: dict[str, ModelCalibration]) -> None:
    """Compare each sample's composed count with its whole count (asked now)."""
    for model_id, cells in samples.items():
        report, known = reports[model_id], counts.models[model_id]
        for cell in cells:
            counter = cell.model.counter
            assert counter is not None and cell.composed is not None and cell.request is not None
            whole = counter.line(cell.request)
            if whole is None:
                continue
            report.checked += 1
            if whole != cell.composed:
                report.disagreed.append(f"{cell.record['cell_id']}: composed {cell.composed}, whole {whole}")
        known.composition = "rejected" if report.disagreed else "verified" if report.checked else "unchecked"
        report.composition = known.composition


def _write(path: str, counts: CountsFile) -> None:
    """The counts file, sorted and one count per line (small diffs in git), replaced atomically."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with writing(path):
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(counts.as_dict(), fh, indent=1, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
