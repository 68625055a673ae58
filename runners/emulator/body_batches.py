"""Batch jobs over files of `{"custom_id", "body"}` lines — Mistral's and Together's: what they share, each API's
module saying how it checks one request, answers it, and shows the job.

A job reads its input files at creation; a file holding lines that are not such requests (or too many) fails the
job, with counted errors. Its requests are then answered on the emulator's clock (`config.schedule`); when the job
ends (done, its time out, or cancelled keeping what finished) its output file holds the answers and its error file
the refusals, each line `{"id", "custom_id", "response": {"status_code", "body"}, "error"}`, in shuffled order.
"""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
    requests: list[dict[str, Any]] = []
    errors: Counter[str] = Counter()
    seen: set[str] = set()
    for file_id in input_files:
        for line in store.read_file(file_id).decode("utf-8", errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                errors["A line of the input file is not valid JSON."] += 1
                continue
            custom_id = item.get("custom_id") if isinstance(item, dict) else None
            if not isinstance(custom_id, str) or "body" not in item:
                errors["A line needs a `custom_id` and a `body`."] += 1
            elif custom_id in seen:
                errors[f"Duplicate custom_id {custom_id}."] += 1
            else:
                seen.add(custom_id)
                requests.append(item)
    if len(requests) > kind.max_requests:
        errors[f"A job holds at most {kind.max_requests} requests."] += 1
    job = {
        "id": str(uuid.uuid4()),
        "input_files": list(input_files),
        **fields,
        "created": now,
        "total": len(requests),
        "errors": [{"message": message, "count": count} for message, count in errors.items()],
        "cancel_at": None,
        "final": None,
        "requests": [] if errors else requests,
        **draw_batch_faults(config.faults, rng, len(requests)),
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
    """The job's schedule and how many of its requests are done at ``now``; ends it (writing its files, setting
    `final`: status done/expired/cancelled/failed, times, counts, file ids) when its end has come."""
    t = schedule(job, config.timing)
    if job["final"] is None:
        _maybe_end(store, kind, job, config, t, now, responder)
    return t, t.done_by(job["total"], now)


def _maybe_end(
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
    if now < end:
        return
    stop = t.expire if status == "expired" else job["cancel_at"] or end
    done = job["total"] if status == "done" else t.done_by(job["total"], stop)
    ok_lines, error_lines = [], []
    failing = set(job["failing"])
    for index, request in enumerate(job["requests"][:done]):
        custom_id, body = request["custom_id"], request["body"]
        line: dict[str, Any] = {"id": new_id("batch-"), "custom_id": custom_id}
        problem = kind.problem(body, config)
        if problem is None and index in failing:
            problem = (500, "Internal server error")
        if problem is not None:
            code, message = problem
            line.update(response={"status_code": code, "body": kind.error_body(code, message)}, error=None)
            error_lines.append(line)
            continue
        answer = kind.answer({"model": job.get("model"), **body}, responder, "batch:" + custom_id, int(end))
        line.update(response={"status_code": 200, "body": answer}, error=None)
        ok_lines.append(line)
    final: dict[str, Any] = {
        "status": status,
        "started": t.start,
        "ended": end,
        "done": done,
        "succeeded": len(ok_lines),
        "failed": len(error_lines),
        "output_file": None,
        "error_file": None,
    }
    for name, lines in (("output_file", ok_lines), ("error_file", error_lines)):
        if lines:
            random.Random(f"{config.seed}:{job['id']}:{name}").shuffle(lines)
            data = "".join(json.dumps(x) + "\n" for x in lines).encode()
            final[name] = store.put_file(f"{job['id']}-{name}.jsonl", "batch_result", data, int(end), prefix="").id
    job["final"] = final
    job["requests"] = []
    store.save()
