"""Gemini batch jobs: BATCH_STATE_PENDING → RUNNING → SUCCEEDED (or CANCELLED, EXPIRED), as long-running operations
(`{name, metadata: {state, output, ...}, done}`), RFC 3339 times; the responses file holds one line per request in
input order (ai.google.dev/gemini-api/docs/batch-api: "written in the same order as the input requests"):
`{"key", "response"}`, or `{"key", "error": {code, message, status}}` for a request that failed."""

from __future__ import annotations

import json
import random
from typing import Any

from nspec.runners.emulator import spool
from nspec.runners.emulator.anthropic_batches import rfc3339
from nspec.runners.emulator.caching import google_cached
from nspec.runners.emulator.config import EmulatorConfig, draw_batch_faults, schedule
from nspec.runners.emulator.generation import google_response
from nspec.runners.emulator.responders import Responder
from nspec.runners.emulator.state import Store, new_id
from nspec.runners.providers.google import GENERATION_FIELDS

MAX_FILE_BYTES = 2_000_000_000  # ai.google.dev: input files up to 2 GB
_REQUEST_FIELDS = (
    "model",
    "contents",
    "systemInstruction",
    "generationConfig",
    "safetySettings",
    "tools",
    "toolConfig",
    "cachedContent",
    "labels",
)


class InvalidArgument(ValueError):
    """A create call the real API refuses with 400 INVALID_ARGUMENT."""


def request_problem(request: Any) -> str | None:
    """What the API refuses in one GenerateContentRequest (its own words, shortened), or None."""
    if not isinstance(request, dict):
        return "Invalid JSON payload received: the request must be an object."
    for name in request:
        if name not in _REQUEST_FIELDS:
            return f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.'
    contents = request.get("contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    config = request.get("generationConfig") or {}
    if not isinstance(config, dict):
        return "Invalid JSON payload received. generation_config must be an object."
    for name in config:
        if name not in GENERATION_FIELDS:
            return f"Invalid JSON payload received. Unknown name \"{name}\" at 'generation_config': Cannot find field."
    limit = config.get("maxOutputTokens")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        return "* GenerateContentRequest.generation_config.max_output_tokens: must be positive"
    return None


def create(
    store: Store, config: EmulatorConfig, rng: random.Random, model: str, body: Any, now: float
) -> dict[str, Any]:
    batch = body.get("batch") if isinstance(body, dict) else None
    source = batch.get("inputConfig") if isinstance(batch, dict) else None
    if not isinstance(batch, dict) or not isinstance(source, dict) or not isinstance(source.get("fileName"), str):
        raise InvalidArgument("* BatchGenerateContentRequest.batch.input_config: a file name is required")
    file_id = source["fileName"].removeprefix("files/")
    if file_id not in store.files:
        raise InvalidArgument(f"File {source['fileName']} does not exist.")
    size = store.path(file_id).stat().st_size
    if size > MAX_FILE_BYTES:
        raise InvalidArgument(f"The input file is {size} bytes; at most {MAX_FILE_BYTES}.")
    total = _check_lines(store, file_id)
    job = {
        "id": new_id("batch"),
        "model": model,
        "display_name": batch.get("displayName") or "",
        "created": now,
        "total": total,
        "cancel_at": None,
        "final": None,
        "work": spool.start(store, file_id, ("responses",), total),
        **draw_batch_faults(config.faults, rng, total),
    }
    return store.add_batch(store.google_batches, job)


def _check_lines(store: Store, file_id: str) -> int:
    """How many `{key, request}` lines the input file holds, read a line at a time; a line that is not one, or a
    key used twice, refuses the batch."""
    keys: set[str] = set()
    with open(store.path(file_id), "rb") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError:
                raise InvalidArgument(f"Line {number} of the input file is not valid JSON.") from None
            if not isinstance(item, dict) or not isinstance(item.get("key"), str) or "request" not in item:
                raise InvalidArgument(f"Line {number} of the input file needs a `key` and a `request`.")
            if item["key"] in keys:
                raise InvalidArgument(f"Line {number}: the key {item['key']!r} is used more than once.")
            keys.add(item["key"])
    if not keys:
        raise InvalidArgument("The input file holds no requests.")
    return len(keys)


def cancel(store: Store, job: dict[str, Any], now: float) -> None:
    with store.lock:
        if job["final"] is None and job["cancel_at"] is None:
            job["cancel_at"] = now
            store.save()


def operation(
    store: Store, job: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder
) -> dict[str, Any]:
    """The batch as the API shows it: a long-running operation whose metadata is the GenerateContentBatch. Answers
    the requests its schedule has reached since the last look."""
    if job["final"] is None:
        _advance(store, job, config, now, responder)
    t = schedule(job, config.timing)
    state = "BATCH_STATE_PENDING" if now < t.start else "BATCH_STATE_RUNNING"
    metadata: dict[str, Any] = {
        "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
        "name": f"batches/{job['id']}",
        "model": f"models/{job['model']}",
        "displayName": job["display_name"],
        "createTime": rfc3339(job["created"]),
        "updateTime": rfc3339(min(now, t.finalized)),
        "state": state,
        "batchStats": {"requestCount": str(job["total"])},
    }
    final = job["final"]
    if final is not None:
        metadata.update(state=final["state"], endTime=rfc3339(final["ended"]), updateTime=rfc3339(final["ended"]))
        metadata["output"] = {"responsesFile": f"files/{final['file']}"}
        metadata["batchStats"] = final["stats"]
    return {"name": f"batches/{job['id']}", "metadata": metadata, "done": final is not None}


def _advance(store: Store, job: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder) -> None:
    t = schedule(job, config.timing)
    candidates = [(t.finalized, "BATCH_STATE_SUCCEEDED"), (t.expire, "BATCH_STATE_EXPIRED")]
    if job["cancel_at"] is not None:
        candidates.append((job["cancel_at"] + config.timing.cancel_seconds, "BATCH_STATE_CANCELLED"))
    end, state = min(candidates)
    stop = t.expire if state == "BATCH_STATE_EXPIRED" else job["cancel_at"] or end
    done = t.done_by(job["total"], min(now, stop))
    failing = set(job["failing"])

    def answer(index: int, item: dict[str, Any]) -> spool.Answered:
        key, request = item["key"], item["request"]
        problem = request_problem(request)
        if problem is None and index in failing:
            error = {"code": 500, "message": "Internal error encountered.", "status": "INTERNAL"}
        elif problem is not None:
            error = {"code": 400, "message": problem, "status": "INVALID_ARGUMENT"}
        else:
            asked = {**request, "model": job["model"]}
            response = google_response(asked, responder, "batch:" + key, config.responder.reasoning_share)
            google_cached(store.caches, asked, response, now)
            return "responses", {"key": key, "response": response}, {"ok": 1}
        return "responses", {"key": key, "error": error}, {"failed": 1}

    with store.lock:
        if job["final"] is not None:  # another look ended it meanwhile
            return
        work = job["work"]
        moved = spool.advance(store, work, done, answer, config.timing.look_seconds)
        if now >= end and work["answered"] >= done:  # ends once caught up; what finished has a line, in input order
            names = {"responses": (f"{job['id']}-responses.jsonl", "batch_output", "")}
            kept = spool.finish(store, work, None, None, names, int(end))
            tally = work["tally"]
            stats = {
                "requestCount": str(job["total"]),
                "successfulRequestCount": str(tally.get("ok", 0)),
                "failedRequestCount": str(tally.get("failed", 0)),
                "pendingRequestCount": "0",
            }
            empty = "responses" not in kept  # nothing finished: an empty file, as the API still names one
            stored = (
                store.put_file(f"{job['id']}-responses.jsonl", "batch_output", b"", int(end), prefix="")
                if empty
                else kept["responses"]
            )
            job["final"] = {"state": state, "ended": end, "file": stored.id, "stats": stats}
            moved = True
        if moved:
            store.save()
