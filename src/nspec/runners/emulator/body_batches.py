"""Batch jobs over files of `{"custom_id", "body"}` lines — Mistral's and Together's: what they share, each API's
module saying how it checks one request, answers it, and shows the job.

A job reads its input files a line at a time at creation, keeping its requests in a file of its own; a file holding
lines that are not such requests (or too many) fails the job, with counted errors. Its requests are then answered a
line at a time as the emulator's clock reaches them (`spool`, `config.schedule`), so a job of any size is held on
disk, not in memory; when the job ends (done, its time out, or cancelled keeping what finished) its output file holds
the answers and its error file the refusals, each line `{"id", "custom_id", "response": {"status_code", "body"},
"error"}`, in shuffled order.
"""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nspec.runners.emulator import spool
from nspec.runners.emulator.config import EmulatorConfig, Schedule, draw_batch_faults, schedule
from nspec.runners.emulator.responders import Responder
from nspec.runners.emulator.state import Store, new_id

Problem = Callable[[Any, EmulatorConfig], "tuple[int, str] | None"]  # (body, config) → (status, message) refused
Answer = Callable[[dict[str, Any], Responder, str, int], dict[str, Any]]  # (body, responder, key, created) → body


@dataclass(frozen=True)
class Kind:
    """One API's batches: where they are kept, how many requests a job may hold, and its request hooks."""

    table: str  # the Store attribute holding its jobs
    max_requests: int
    problem: Problem
    answer: Answer
    error_body: Callable[[int, str], dict[str, Any]]  # (status, message) → the API's error body


def create(
    store: Store,
    config: EmulatorConfig,
    rng: random.Random,
    kind: Kind,
    input_files: list[str],
    fields: dict[str, Any],
    now: float,
) -> dict[str, Any]:
    """A job over ``input_files`` (``fields``: what the API keeps with it, as model and metadata)."""
    errors: Counter[str] = Counter()
    seen: set[str] = set()
    copy = store.scratch_path()  # the job's requests, one per line, in order
    with open(copy, "wb") as out:
        for file_id in input_files:
            with open(store.path(file_id), "rb") as fh:
                for raw in fh:
                    if not raw.strip():
                        continue
                    try:
                        item = json.loads(raw)
                    except ValueError:
                        errors["A line of the input file is not valid JSON."] += 1
                        continue
                    custom_id = item.get("custom_id") if isinstance(item, dict) else None
                    if not isinstance(custom_id, str) or "body" not in item:
                        errors["A line needs a `custom_id` and a `body`."] += 1
                    elif custom_id in seen:
                        errors[f"Duplicate custom_id {custom_id}."] += 1
                    else:
                        seen.add(custom_id)
                        out.write(json.dumps({"custom_id": custom_id, "body": item["body"]}).encode() + b"\n")
    total = len(seen)
    if total > kind.max_requests:
        errors[f"A job holds at most {kind.max_requests} requests."] += 1
    if errors:
        copy.unlink()
    job = {
        "id": str(uuid.uuid4()),
        "input_files": list(input_files),
        **fields,
        "created": now,
        "total": total,
        "errors": [{"message": message, "count": count} for message, count in errors.items()],
        "cancel_at": None,
        "final": None,
        "work": None if errors else spool.start(store, copy.name, ("output", "error"), total, owned=True),
        **draw_batch_faults(config.faults, rng, total),
    }
    return store.add_batch(getattr(store, kind.table), job)


def cancel(store: Store, job: dict[str, Any], now: float) -> None:
    with store.lock:
        if job["final"] is None and job["cancel_at"] is None:
            job["cancel_at"] = now
            store.save()


def progress(
    store: Store, kind: Kind, job: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder
) -> tuple[Schedule, int]:
    """The job's schedule and how many of its requests are done at ``now``, answering those reached since the last
    look; ends it (writing its files, setting `final`: status done/expired/cancelled/failed, times, counts, file
    ids) when its end has come."""
    t = schedule(job, config.timing)
    if job["final"] is None:
        _advance(store, kind, job, config, t, now, responder)
    answered = job["work"]["answered"] if job["work"] is not None else 0
    return t, min(t.done_by(job["total"], now), answered)


def _advance(
    store: Store,
    kind: Kind,
    job: dict[str, Any],
    config: EmulatorConfig,
    t: Schedule,
    now: float,
    responder: Responder,
) -> None:
    if job["errors"]:
        if now >= t.start:
            job["final"] = {"status": "failed", "ended": t.start}
            store.save()
        return
    candidates = [(t.finalized, "done"), (t.expire, "expired")]
    if job["cancel_at"] is not None:
        candidates.append((job["cancel_at"] + config.timing.cancel_seconds, "cancelled"))
    end, status = min(candidates)
    stop = t.expire if status == "expired" else job["cancel_at"] or end
    done = t.done_by(job["total"], min(now, stop))
    failing = set(job["failing"])

    def answer(index: int, request: dict[str, Any]) -> spool.Answered:
        custom_id, body = request["custom_id"], request["body"]
        line: dict[str, Any] = {"id": new_id("batch-"), "custom_id": custom_id}
        problem = kind.problem(body, config)
        if problem is None and index in failing:
            problem = (500, "Internal server error")
        if problem is not None:
            code, message = problem
            response = {"status_code": code, "body": kind.error_body(code, message)}
            return "error", {**line, "response": response, "error": None}, {}
        answered = kind.answer({"model": job.get("model"), **body}, responder, "batch:" + custom_id, int(now))
        return "output", {**line, "response": {"status_code": 200, "body": answered}, "error": None}, {"succeeded": 1}

    with store.lock:
        if job["final"] is not None:  # another look ended it meanwhile
            return
        work = job["work"]
        moved = spool.advance(store, work, done, answer, config.timing.look_seconds)
        if now >= end and work["answered"] >= done:  # ends once the answering has caught up
            names = {name: (f"{job['id']}-{name}_file.jsonl", "batch_result", "") for name in ("output", "error")}
            kept = spool.finish(store, work, None, f"{config.seed}:{job['id']}", names, int(end))
            succeeded = work["tally"].get("succeeded", 0)
            job["final"] = {
                "status": status,
                "started": t.start,
                "ended": end,
                "done": work["answered"],
                "succeeded": succeeded,
                "failed": work["answered"] - succeeded,
                "output_file": kept["output"].id if "output" in kept else None,
                "error_file": kept["error"].id if "error" in kept else None,
            }
            moved = True
        if moved:
            store.save()
