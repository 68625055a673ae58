"""Importing results computed elsewhere: the output file of `vllm run-batch` (or any engine that reads the compiled
OpenAI request shards and writes OpenAI batch-output lines — one line per request, errors inline) becomes the run's
results, keyed by custom_id, exactly as if nspec had collected them.

This is the way past one machine: compile, copy `answers/requests/*.jsonl` to GPUs, run them there, bring the output
file back with `nspec collect RUN --from FILE`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nspec.compiler.prices import Usage as TokenUsage
from nspec.compiler.providers.contract import OPENAI_CHAT
from nspec.compiler.providers.io import Outcome
from nspec.compiler.providers.registry import names, provider
from nspec.errors import UserError
from nspec.inputs import open_regular
from nspec.runners.providers import DATA_ERRORS, checked
from nspec.runners.run_store import ResultsFile, Run, record_outcome, shard_lines


@dataclass
class Imported:
    written: int = 0  # new results
    already: int = 0  # cells that had a result before
    unknown: int = 0  # lines whose custom_id is no request of this run
    failed: int = 0  # requests of the run whose final result is an error (imported now or before)
    missing: int = 0  # requests of the run still without a result


def import_results(run: Run, source: Path, stage: str = "answers") -> Imported:
    """Append the results in ``source`` to the stage's results file and record them in the ledger."""
    if not source.exists():
        raise UserError(f"no such file: {source}")
    owner: dict[str, tuple[str, str]] = {}  # custom_id → (model, shard)
    for model in run.models(stage):
        if provider(model.provider).request_format != OPENAI_CHAT:
            continue  # only OpenAI-format shards can have been run by such an engine
        for compiled in model.shards:
            for cid, _ in shard_lines(run.path / compiled["file"]):
                owner[cid] = (model.label, compiled["file"])
    parse_output = next((provider(n).parse_result for n in names() if provider(n).request_format == OPENAI_CHAT), None)
    if parse_output is None:
        raise UserError("no installed provider reads OpenAI batch-output lines")
    with open_regular(str(source)) as fh:  # every line checked before any is recorded: a bad file imports nothing
        for number, raw in enumerate(fh, 1):
            if raw.strip():
                _parse_line(parse_output, raw, f"{source}:{number}")
    ledger = run.ledger()
    results = ResultsFile(run.paths.results(stage))
    report = Imported()

    def costing(model: str, kind: str, usage: TokenUsage) -> float | None:
        return None  # made elsewhere, on a lane nspec cannot know: its cost is unknown, not guessed

    try:
        registered = {j.shard for j in ledger.jobs(stage)}
        with open_regular(str(source)) as fh:
            for number, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                outcome = _parse_line(parse_output, raw, f"{source}:{number}")
                if outcome.custom_id not in owner:
                    report.unknown += 1
                    continue
                label, shard = owner[outcome.custom_id]
                if shard not in registered:
                    ids = [cid for cid, _ in shard_lines(run.path / shard)]
                    sha = next(s["sha256"] for m in run.models(stage) for s in m.shards if s["file"] == shard)
                    ledger.add_job(stage, label, "import", shard, sha, ids, 1)
                    registered.add(shard)
                source_info = {"kind": "import", "file": source.name}
                if record_outcome(results, ledger, stage, label, outcome, source_info, costing):
                    report.written += 1
                else:
                    report.already += 1
        report.missing = len(set(owner) - results.ids)
        report.failed = sum(e["states"].get("failed", 0) for e in ledger.counts(stage).values())
    finally:
        results.close()
        ledger.close()
    return report


def _parse_line(parse: Callable[[Mapping[str, Any]], Outcome], raw: bytes, where: str) -> Outcome:
    """One output line, or a located error saying why it is not one."""
    try:
        line = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{where}: not a JSON line ({exc})") from None
    if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
        raise UserError(f"{where}: not a batch output line (a JSON object with a custom_id)")
    try:
        return checked(parse(line))
    except DATA_ERRORS as exc:
        raise UserError(f"{where}: not a batch output line ({type(exc).__name__}: {exc})") from None
