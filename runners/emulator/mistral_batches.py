"""Mistral batch jobs (docs.mistral.ai/capabilities/batch): QUEUED → RUNNING (counts move) → SUCCESS; a job asked to
cancel is CANCELLATION_REQUESTED, then CANCELLED keeping what finished; one whose time runs out is TIMEOUT_EXCEEDED.
Input lines are `{"custom_id", "body"}`; output lines `{"id", "custom_id", "response": {"status_code", "body"},
"error"}`, failures in a separate error file; Unix-second timestamps."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from typing import Any

from nspec.runners.emulator.config import EmulatorConfig, draw_batch_faults, schedule
from nspec.runners.emulator.generation import mistral_completion
from nspec.runners.emulator.models import served
from nspec.runners.emulator.responders import Responder
from nspec.runners.emulator.state import Store, new_id
from nspec.runners.providers.mistral import REQUEST_FIELDS

MAX_REQUESTS = 1_000_000


def line_problem(body: Any, model: str | None, extra_models: list[str]) -> tuple[int, str] | None:
    """What Mistral answers one request of a batch with, when it refuses it: (status, message)."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        return 422, "messages: Field required"
    unknown = sorted(set(body) - REQUEST_FIELDS)
    if unknown:
        return 422, f"{unknown[0]}: Extra inputs are not permitted"
    name = body.get("model") or model
    if not isinstance(name, str) or not served("mistral", name, extra_models):
        return 400, f"Invalid model: {name}"
    limit = body.get("max_tokens")
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        return 422, "max_tokens: Input should be greater than or equal to 0"
    return None


def create(
    store: Store, config: EmulatorConfig, rng: random.Random, body: dict[str, Any], now: float
) -> dict[str, Any]:
    """A job over the input files; a file that does not hold valid lines fails the job (errors with counts)."""
    requests: list[dict[str, Any]] = []
    errors: Counter[str] = Counter()
    seen: set[str] = set()
    for file_id in body["input_files"]:
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
    if len(requests) > MAX_REQUESTS:
        errors[f"A job holds at most {MAX_REQUESTS} requests."] += 1
    job = {
        "id": str(uuid.uuid4()),
        "input_files": list(body["input_files"]),
        "model": body.get("model"),
        "metadata": body.get("metadata"),
        "created": now,
        "total": len(requests),
        "errors": [{"message": message, "count": count} for message, count in errors.items()],
        "cancel_at": None,
        "final": None,
        "requests": [] if errors else requests,
        **draw_batch_faults(config.faults, rng, [r["custom_id"] for r in requests]),
    }
    return store.add_batch(store.mistral_batches, job)


def cancel(store: Store, job: dict[str, Any], now: float) -> None:
    with store.lock:
        if job["final"] is None and job["cancel_at"] is None:
            job["cancel_at"] = now
            store.save()


def view(store: Store, job: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder) -> dict[str, Any]:
    """The BatchJob object as of ``now``; the result files are written when the job first reaches its end."""
    if job["final"] is None:
        _maybe_end(store, job, config, now, responder)
    t = schedule(job, config.timing)
    base = {
        "id": job["id"],
        "object": "batch",
        "input_files": job["input_files"],
        "metadata": job["metadata"],
        "endpoint": "/v1/chat/completions",
        "model": job["model"],
        "errors": job["errors"],
        "status": "QUEUED",
        "created_at": int(job["created"]),
        "total_requests": job["total"],
        "completed_requests": 0,
        "succeeded_requests": 0,
        "failed_requests": 0,
        "output_file": None,
        "error_file": None,
        "started_at": None,
        "completed_at": None,
    }
    if job["final"] is not None:
        return {**base, **job["final"]}
    if job["errors"]:
        return base
    if now >= t.start:
        done = t.done_by(job["total"], now)
        base.update(status="RUNNING", started_at=int(t.start), completed_requests=done, succeeded_requests=done)
    if job["cancel_at"] is not None:
        base["status"] = "CANCELLATION_REQUESTED"
    return base


def _maybe_end(store: Store, job: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder) -> None:
    t = schedule(job, config.timing)
    if job["errors"]:
        if now >= t.start:
            job["final"] = {"status": "FAILED", "completed_at": int(t.start)}
            store.save()
        return
    candidates = [(t.finalized, "SUCCESS"), (t.expire, "TIMEOUT_EXCEEDED")]
    if job["cancel_at"] is not None:
        candidates.append((job["cancel_at"] + config.timing.cancel_seconds, "CANCELLED"))
    end, status = min(candidates)
    if now < end:
        return
    stop = t.expire if status == "TIMEOUT_EXCEEDED" else job["cancel_at"] or end
    done = job["total"] if status == "SUCCESS" else t.done_by(job["total"], stop)
    ok_lines, error_lines = [], []
    for request in job["requests"][:done]:
        custom_id, body = request["custom_id"], request["body"]
        line: dict[str, Any] = {"id": new_id("batch-"), "custom_id": custom_id}
        problem = line_problem(body, job["model"], config.models)
        if problem is None and job["outcomes"][custom_id] == "error":
            problem = (500, "Internal server error")
        if problem is not None:
            status_code, message = problem
            error_body = {
                "object": "error",
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
            line.update(
                response={"status_code": status_code, "body": error_body},
                error={"message": message, "code": str(status_code)},
            )
            error_lines.append(line)
            continue
        answer = mistral_completion({"model": job["model"], **body}, responder, "batch:" + custom_id, int(end))
        line.update(response={"status_code": 200, "body": answer}, error=None)
        ok_lines.append(line)
    final: dict[str, Any] = {
        "status": status,
        "started_at": int(t.start),
        "completed_at": int(end),
        "completed_requests": done,
        "succeeded_requests": len(ok_lines),
        "failed_requests": len(error_lines),
    }
    for name, lines in (("output_file", ok_lines), ("error_file", error_lines)):
        if lines:
            random.Random(f"{config.seed}:{job['id']}:{name}").shuffle(lines)
            data = "".join(json.dumps(x) + "\n" for x in lines).encode()
            final[name] = store.put_file(f"{job['id']}-{name}.jsonl", "batch_result", data, int(end), prefix="").id
    job["final"] = final
    job["requests"] = []
    store.save()
