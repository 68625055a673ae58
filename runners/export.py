"""Exporting a run's requests for engines on other machines: `vllm run-batch` (and drivers built on vLLM, such as
Ray Data LLM) read OpenAI batch-input lines and write OpenAI batch-output lines, which `nspec collect RUN --from`
imports. Only what vLLM serves is exported (its run-batch takes `/v1/chat/completions` lines of one model per file);
requests that share a prompt prefix (a cache group, see `compiler.caching`) stay in one file and in compile order, so
the engine's prefix cache sees them together.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nspec.errors import UserError
from nspec.providers import OPENAI_CHAT, provider
from nspec.runners.rundir import Run, shard_lines

VLLM_ENDPOINTS = ("/v1/chat/completions",)  # what nspec compiles that `vllm run-batch` serves
# Request fields only OpenAI's service knows: routing and storage hints, not part of the model's input.
OPENAI_ONLY = ("prompt_cache_key", "service_tier", "store", "metadata", "safety_identifier")


@dataclass
class Exported:
    folder: Path
    files: list[dict[str, Any]] = field(default_factory=list)  # per file: name, model, served name, requests


def export_vllm(run: Run, shards: int, served_model_name: str | None = None, stage: str = "answers") -> Exported:
    """Write the stage's requests of every OpenAI-format model as ``shards`` files per model (fewer when it has
    fewer cache groups) under ``RUN/export/vllm/``; ``served_model_name`` replaces each body's model (what `vllm
    run-batch --served-model-name` serves)."""
    if shards < 1:
        raise UserError(f"--shards must be at least 1 (got {shards})")
    models = run.models(stage)
    if not models:
        raise UserError(f"{run.path}: the {stage} stage has no requests yet")
    others = [m.label for m in models if provider(m.provider).request_format != OPENAI_CHAT]
    if others:
        raise UserError(
            f"vLLM's run-batch reads OpenAI-format requests; {', '.join(others)} compiled in another format: "
            "export a spec whose models are OpenAI-format (openai/, local/, or an OpenAI-compatible host)"
        )
    groups = _groups(run, stage)
    folder = run.path / "export" / "vllm" / stage
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.jsonl"):
        stale.unlink()
    exported = Exported(folder)
    for model in models:
        sizes: dict[str, int] = defaultdict(int)  # cache group → bytes
        for s in model.shards:
            for cid, raw in shard_lines(run.path / s["file"]):
                sizes[groups.get(cid, cid)] += len(raw)
        # Largest groups first, each to the file with the fewest bytes so far: files of about equal size.
        count = min(shards, len(sizes))
        loads = [0] * count
        home: dict[str, int] = {}
        for group in sorted(sizes, key=lambda g: (-sizes[g], g)):
            target = loads.index(min(loads))
            home[group], loads[target] = target, loads[target] + sizes[group]
        slug = Path(model.shards[0]["file"]).name.rsplit("-", 1)[0]
        names = [f"{slug}-{i + 1:04d}.jsonl" for i in range(count)]
        handles = [open(folder / name, "wb") for name in names]  # noqa: SIM115 - closed below
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
            {"file": str(folder / n), "model": model.label, "served_model_name": served, "requests": k}
            for n, k in zip(names, counts, strict=True)
        ]
    return exported


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
