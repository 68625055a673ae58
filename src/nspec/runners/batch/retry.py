"""The policy for requests a batch left to retry: a model's small remainder goes live; the rest into a new shard of
its own, recorded as a job whose batch is created like any other."""

from __future__ import annotations

import hashlib
from pathlib import Path

from nspec.runners.batch.stage import UNSENT, BatchStage, Progress
from nspec.runners.run_store import Run, RunModel, shard_lines


def plan_retries(stage: BatchStage, live_below: int, progress: Progress) -> None:
    """Each model's requests to retry: fewer than ``live_below`` into ``progress.live``, else into a retry shard,
    recorded as a planned job."""
    unsent = {job.shard for job in stage.ledger.jobs(stage.name, UNSENT)}
    for model in stage.models:
        # Requests already in a retry shard whose batch is not created yet wait for that one: never a second.
        rows = [r for r in stage.ledger.requests_in(stage.name, model.label, "retry") if r["shard"] not in unsent]
        if not rows:
            continue
        if len(rows) < live_below:
            progress.live += [r["custom_id"] for r in rows]
            continue
        attempt = max(r["attempts"] for r in rows) + 1
        wanted = {r["custom_id"] for r in rows}
        first = Path(model.shards[0]["file"])
        slug = first.name.rsplit("-", 1)[0]
        number = len(stage.ledger.jobs(stage.name)) + 1
        shard = str(first.parent / f"{slug}-retry{attempt}-{number:04d}.jsonl")
        sha = _write_shard(stage.run, model, shard, wanted)
        stage.ledger.mark_retry(sorted(wanted), shard)
        stage.ledger.add_job(stage.name, model.label, model.provider, shard, sha, sorted(wanted), attempt)


def _write_shard(run: Run, model: RunModel, shard: str, wanted: set[str]) -> str:
    """Write the lines of ``wanted`` from the model's shards into ``shard`` (whole, or not at all); its sha256."""
    target = run.path / shard
    tmp = target.with_suffix(".part")
    with open(tmp, "wb") as out:  # a line at a time: the retries may be most of a 200 MB shard
        for s in model.shards:
            out.writelines(line for cid, line in shard_lines(run.path / s["file"]) if cid in wanted)
    tmp.replace(target)
    with open(target, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
