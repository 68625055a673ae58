"""Anthropic message batches: in_progress → (canceling →) ended, counts zero but `processing` until the end,
RFC 3339 timestamps, results (succeeded / errored / canceled / expired) in shuffled order at `results_url`."""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from typing import Any

from nspec.runners.emulator.caching import breakpoint_problem
from nspec.runners.emulator.config import EmulatorConfig, draw_batch_faults, schedule
from nspec.runners.emulator.generation import anthropic_message
from nspec.runners.emulator.models import anthropic_refusal, served
from nspec.runners.emulator.responders import Responder
from nspec.runners.emulator.state import Store, new_id

CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class InvalidRequest(ValueError):
    """A create-batch call the real API refuses with 400 invalid_request_error."""


def rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def create(
    store: Store, config: EmulatorConfig, rng: random.Random, body: Any, size: int, now: float
) -> dict[str, Any]:
    requests = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(requests, list) or not requests:
        raise InvalidRequest("requests: at least one request is required")
    if len(requests) > config.limits.anthropic_max_requests:
        raise InvalidRequest(f"requests: at most {config.limits.anthropic_max_requests} requests per batch")
    if size > config.limits.anthropic_max_bytes:
        raise InvalidRequest(f"request body: at most {config.limits.anthropic_max_bytes} bytes per batch")
    seen: set[str] = set()
    for i, request in enumerate(requests):
        custom_id = request.get("custom_id") if isinstance(request, dict) else None
        if not isinstance(custom_id, str) or not CUSTOM_ID.match(custom_id):
            raise InvalidRequest(f"requests.{i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
        if custom_id in seen:
            raise InvalidRequest(f"requests.{i}.custom_id: duplicate custom_id '{custom_id}'")
        seen.add(custom_id)
        params = request.get("params")
        if not isinstance(params, dict):
            raise InvalidRequest(f"requests.{i}.params: Field required")
        for name in ("model", "max_tokens", "messages"):
            if name not in params:
                raise InvalidRequest(f"requests.{i}.params.{name}: Field required")
    batch = {
        "id": new_id("msgbatch_"),
        "created": now,
        "total": len(requests),
        "cancel_at": None,
        "requests": requests,
        "final": None,  # counts, ended_at and the results file id, once ended
        **draw_batch_faults(config.faults, rng, [r["custom_id"] for r in requests]),
    }
    return store.add_batch(store.anthropic_batches, batch)


def cancel(store: Store, batch: dict[str, Any], now: float) -> None:
    with store.lock:
        if batch["final"] is None and batch["cancel_at"] is None:
            batch["cancel_at"] = now
            store.save()


def status(
    store: Store, batch: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder, base_url: str
) -> dict[str, Any]:
    if batch["final"] is None:
        _maybe_end(store, batch, config, now, responder)
    view = {
        "id": batch["id"],
        "type": "message_batch",
        "processing_status": "in_progress",
        "request_counts": {"processing": batch["total"], "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
        "created_at": rfc3339(batch["created"]),
        "expires_at": rfc3339(batch["created"] + config.timing.completion_window_seconds),
        "ended_at": None,
        "cancel_initiated_at": None,
        "archived_at": None,
        "results_url": None,
    }
    if batch["cancel_at"] is not None:
        view.update(processing_status="canceling", cancel_initiated_at=rfc3339(batch["cancel_at"]))
    final = batch["final"]
    if final is not None:
        view.update(
            processing_status="ended",
            request_counts=final["counts"],
            ended_at=rfc3339(final["ended"]),
            results_url=f"{base_url}v1/messages/batches/{batch['id']}/results",
        )
    return view


def _maybe_end(store: Store, batch: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder) -> None:
    t = schedule(batch, config.timing, validates=False)
    candidates = [(t.finalized, "done"), (t.expire, "expired")]
    if batch["cancel_at"] is not None:
        candidates.append((batch["cancel_at"] + config.timing.cancel_seconds, "canceled"))
    end, outcome = min(candidates)
    if now < end:
        return
    stop = t.expire if outcome == "expired" else batch["cancel_at"] or end
    done = batch["total"] if outcome == "done" else t.done_by(batch["total"], stop)
    counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    lines = []
    for index, request in enumerate(batch["requests"]):
        custom_id = request["custom_id"]
        if index >= done:
            kind = "expired" if outcome == "expired" else "canceled"
            result: dict[str, Any] = {"type": kind}
        elif batch["outcomes"][custom_id] == "error":
            kind, result = (
                "errored",
                {
                    "type": "errored",
                    "error": {
                        "type": "error",
                        "error": {"type": "api_error", "message": "Internal server error"},
                        "request_id": None,
                    },
                },
            )
        elif not served("anthropic", request["params"]["model"], config.models):
            error = {"type": "error", "error": anthropic_refusal(request["params"]["model"]), "request_id": None}
            kind, result = "errored", {"type": "errored", "error": error}
        else:
            problem = _param_problem(request["params"])
            if problem:
                kind, result = (
                    "errored",
                    {
                        "type": "errored",
                        "error": {
                            "type": "error",
                            "error": {"type": "invalid_request_error", "message": problem},
                            "request_id": None,
                        },
                    },
                )
            else:
                message = anthropic_message(request["params"], responder, "batch:" + custom_id)
                usage = message["usage"]
                usage.update(store.caches.anthropic(request["params"], usage["input_tokens"], now))
                kind, result = "succeeded", {"type": "succeeded", "message": message}
        counts[kind] += 1
        lines.append({"custom_id": custom_id, "result": result})
    random.Random(f"{config.seed}:{batch['id']}").shuffle(lines)
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    results = store.put_file(f"{batch['id']}_results.jsonl", "batch_results", data, int(end), prefix="results-")
    batch["final"] = {"counts": counts, "ended": end, "results_file": results.id}
    batch["requests"] = []
    store.save()


def _param_problem(params: dict[str, Any]) -> str | None:
    """Problems the real API reports per request, inside the results."""
    if not isinstance(params.get("max_tokens"), int) or params["max_tokens"] < 1:
        return "max_tokens: Input should be a positive integer"
    messages = params.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    if messages[0].get("role") != "user":
        return 'messages: first message must use the "user" role'
    return breakpoint_problem(params)
