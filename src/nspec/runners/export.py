"""Exporting a run's requests for engines on other machines: `vllm run-batch` (and drivers built on vLLM, such as
Ray Data LLM) read OpenAI batch-input lines and write OpenAI batch-output lines, which `nspec collect RUN --from`
imports. Only what vLLM serves is exported (its run-batch takes `/v1/chat/completions` lines of one model per file):
a run's other models are left out, and the export says so (or the models to export are named). Requests that share a
prompt prefix (a cache group, see `compiler.caching`) stay in one file and in compile order, so the engine's prefix
cache sees them together; a model with fewer groups than the files asked for gets fewer files, and the export says
why.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nspec.compiler.providers.contract import OPENAI_CHAT
from nspec.compiler.providers.registry import provider
from nspec.errors import UserError
from nspec.runners.run_store import Run, RunModel, shard_lines

VLLM_ENDPOINTS = ("/v1/chat/completions",)  # what nspec compiles that `vllm run-batch` serves
# Request fields only OpenAI's service knows: routing and storage hints, not part of the model's input.
OPENAI_ONLY = ("prompt_cache_key", "service_tier", "store", "metadata", "safety_identifier")


@dataclass
class Exported:
    folder: Path
    files: list[dict[str, Any]] = field(default_factory=list)  # per file: name, model, served name, requests
    notes: list[str] = field(default_factory=list)  # models left out, and fewer files than asked: each with why


def export_vllm(
    run: Run,
    shards: int,
    served_model_name: str | None = None,
    stage: str = "answers",
    models: Sequence[str] = (),
) -> Exported:
    """Write the stage's requests of its OpenAI-format chat models (``models``: those named, by name or id) as
    ``shards`` files per model under ``RUN/export/vllm/``, fewer when a model has fewer cache groups (said in the
    notes, as are the models left out); ``served_model_name`` replaces each body's model (what `vllm run-batch
    --served-model-name` serves)."""
    if shards < 1:
        raise UserError(f"--shards must be at least 1 (got {shards})")
    every = run.models(stage)
    if not every:
        raise UserError(f"{run.path}: the {stage} stage has no requests yet")
    chosen = _chosen(every, models)
    exported = Exported(run.path / "export" / "vllm" / stage)
    ready = []
    for model in chosen:
        why = _not_exportable(run, model)
        if why is not None and models:
            raise UserError(f"--models {model.label}: {why}")
        if why is not None:
            exported.notes.append(f"{model.label} left out: {why}")
        else:
            ready.append(model)
    if not ready:
        raise UserError(
            "nothing to export: " + "; ".join(exported.notes) + ". Export a spec with OpenAI-format chat models "
            "(openai/, local/, or an OpenAI-compatible host)"
        )
    groups = _groups(run, stage)
    exported.folder.mkdir(parents=True, exist_ok=True)
    for model in ready:
        sizes: dict[str, int] = defaultdict(int)  # cache group → bytes
        for s in model.shards:
            for cid, raw in shard_lines(run.path / s["file"]):
                sizes[groups.get(cid, cid)] += len(raw)
        # Largest groups first, each to the file with the fewest bytes so far: files of about equal size.
        count = min(shards, len(sizes))
        if count < shards:
            exported.notes.append(
                f"{model.label}: {count} file{'s' * (count != 1)}, not {shards}: its requests form {len(sizes)} "
                f"group{'s' * (len(sizes) != 1)} sharing a prompt prefix, and a group stays in one file (the "
                "engine's prefix cache serves it whole)"
            )
        loads = [0] * count
        home: dict[str, int] = {}
        for group in sorted(sizes, key=lambda g: (-sizes[g], g)):
            target = loads.index(min(loads))
            home[group], loads[target] = target, loads[target] + sizes[group]
        slug = Path(model.shards[0]["file"]).name.rsplit("-", 1)[0]
        ours = re.compile(re.escape(slug) + r"-\d{4}\.jsonl")  # this model's earlier export; never the outputs
        for stale in exported.folder.iterdir():
            if ours.fullmatch(stale.name):
                stale.unlink()
        names = [f"{slug}-{i + 1:04d}.jsonl" for i in range(count)]
        handles = [open(exported.folder / name, "wb") for name in names]  # noqa: SIM115 - closed below
        served = served_model_name or model.entry["id"].split("/", 1)[1]
        counts = [0] * count
        try:
            for s in model.shards:
                for cid, raw in shard_lines(run.path / s["file"]):
                    line = vllm_line(json.loads(raw), served, f"{model.label} ({s['file']})")
                    i = home[groups.get(cid, cid)]
                    handles[i].write(json.dumps(line, ensure_ascii=False).encode() + b"\n")
                    counts[i] += 1
        finally:
            for handle in handles:
                handle.close()
        exported.files += [
            {"file": str(exported.folder / n), "model": model.label, "served_model_name": served, "requests": k}
            for n, k in zip(names, counts, strict=True)
        ]
    return exported


def _chosen(every: list[RunModel], names: Sequence[str]) -> list[RunModel]:
    """The models ``names`` (names or ids), in the run's order; every model without names."""
    if not names:
        return every
    unknown = [n for n in names if not any(n in (m.label, m.entry["id"]) for m in every)]
    if unknown:
        raise UserError(f"--models {', '.join(unknown)}: not a model of this run (its models: {_listed(every)})")
    return [m for m in every if m.label in names or m.entry["id"] in names]


def _not_exportable(run: Run, model: RunModel) -> str | None:
    """Why vLLM's run-batch cannot run a model's requests (None if it can): another request format, another
    endpoint than chat completions, or none at all."""
    if not model.shards:
        return "it has no requests (every cell was dropped)"
    if provider(model.provider).request_format != OPENAI_CHAT:
        return f"its requests are in {model.provider}'s format; vLLM's run-batch reads OpenAI-format chat requests"
    first = next((raw for s in model.shards for _, raw in shard_lines(run.path / s["file"])), None)
    url = None if first is None else json.loads(first).get("url")
    if url is not None and url not in VLLM_ENDPOINTS:
        return f"its requests are for {url}; vLLM's run-batch serves {', '.join(VLLM_ENDPOINTS)} (endpoint: chat)"
    return None


def _listed(models: list[RunModel]) -> str:
    return ", ".join(m.label for m in models)


def vllm_line(line: dict[str, Any], served: str, where: str) -> dict[str, Any]:
    """A compiled OpenAI batch line as `vllm run-batch` takes it."""
    if line.get("url") not in VLLM_ENDPOINTS:
        raise UserError(
            f"{where}: requests for {line.get('url')} cannot be exported: vLLM's run-batch serves "
            f"{', '.join(VLLM_ENDPOINTS)} (set the model's `endpoint: chat`)"
        )
    body = {k: v for k, v in line["body"].items() if k not in OPENAI_ONLY}
    body["model"] = served
    return {"custom_id": line["custom_id"], "method": "POST", "url": line["url"], "body": body}


def _groups(run: Run, stage: str) -> dict[str, str]:
    """custom_id → the group whose requests share a prefix: the cell's cache group, else its model, prompt variant and
    trial (cells compiled together share the haystack up to their needles). Judge requests have none."""
    if stage != "answers":
        return {}
    return {
        cell["cell_id"]: str((cell.get("cache") or {}).get("group") or (cell["model"], cell["prompt"], cell["trial"]))
        for cell in run.cells()
    }
