"""Anthropic message batches: in_progress → (canceling →) ended, counts zero but `processing` until the end,
RFC 3339 timestamps, results (succeeded / errored / canceled / expired) in shuffled order at `results_url`."""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from pathlib import Path
from typing import Any

import ijson

from nspec.runners.emulator import spool
from nspec.runners.emulator.caching import breakpoint_problem
from nspec.runners.emulator.config import EmulatorConfig, draw_batch_faults, schedule
from nspec.runners.emulator.generation import anthropic_message
from nspec.runners.emulator.models import anthropic_refusal, served
from nspec.runners.emulator.responders import Responder
from nspec.runners.emulator.state import Store, new_id
from nspec.runners.providers.anthropic_models import API_VERSION, refusals

CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class InvalidRequest(ValueError):
    """A create-batch call the real API refuses with 400 invalid_request_error."""


def rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def create(
    store: Store, config: EmulatorConfig, rng: random.Random, body: Path, now: float, version: str = API_VERSION
) -> dict[str, Any]:
    """A batch from the create call's body, saved at ``body`` (in the store's folder; taken over): parsed a request at
    a time into the batch's requests file, so a body of 256 MB is never held whole. Its requests are answered under
    the API ``version`` the create call named."""
    try:
        lines = store.scratch_path()
        try:
            total = _spool_requests(body, lines, config.limits.anthropic_max_requests)
        except BaseException:
            lines.unlink(missing_ok=True)
            raise
    finally:
        body.unlink(missing_ok=True)
    batch = {
        "id": new_id("msgbatch_"),
        "created": now,
        "total": total,
        "cancel_at": None,
        "version": version,
        "final": None,  # counts, ended_at and the results file id, once ended
        "work": spool.start(store, lines.name, ("results",), total, owned=True),
        **draw_batch_faults(config.faults, rng, total),
    }
    return store.add_batch(store.anthropic_batches, batch)


def _spool_requests(body: Path, lines: Path, most: int) -> int:
    """Check each request of the body and write it as a line of ``lines``; how many there are."""
    seen: set[str] = set()
    count = 0
    with open(body, "rb") as source, open(lines, "wb") as out:
        try:
            for i, request in enumerate(ijson.items(source, "requests.item", use_float=True)):
                if i == most:
                    raise InvalidRequest(f"requests: at most {most} requests per batch")
                custom_id = request.get("custom_id") if isinstance(request, dict) else None
                if not isinstance(custom_id, str) or not CUSTOM_ID.match(custom_id):
                    raise InvalidRequest(
                        f"requests.{i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
                    )
                if custom_id in seen:
                    raise InvalidRequest(f"requests.{i}.custom_id: duplicate custom_id '{custom_id}'")
                seen.add(custom_id)
                params = request.get("params")
                if not isinstance(params, dict):
                    raise InvalidRequest(f"requests.{i}.params: Field required")
                for name in ("model", "max_tokens", "messages"):
                    if name not in params:
                        raise InvalidRequest(f"requests.{i}.params.{name}: Field required")
                out.write(json.dumps(request).encode() + b"\n")
                count += 1
        except ijson.JSONError:
            raise InvalidRequest("invalid JSON body") from None
    if not count:
        raise InvalidRequest("requests: at least one request is required")
    return count


def cancel(store: Store, batch: dict[str, Any], now: float) -> None:
    with store.lock:
        if batch["final"] is None and batch["cancel_at"] is None:
            batch["cancel_at"] = now
            store.save()


def status(
    store: Store, batch: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder, base_url: str
) -> dict[str, Any]:
    if batch["final"] is None:
        advance(store, batch, config, now, responder)
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


def advance(store: Store, batch: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder) -> None:
    """Answer what the batch's schedule has reached by ``now``; end it when its time comes."""
    t = schedule(batch, config.timing, validates=False)
    candidates = [(t.finalized, "done"), (t.expire, "expired")]
    if batch["cancel_at"] is not None:
        candidates.append((batch["cancel_at"] + config.timing.cancel_seconds, "canceled"))
    end, outcome = min(candidates)
    stop = t.expire if outcome == "expired" else batch["cancel_at"] or end
    done = t.done_by(batch["total"], min(now, stop))
    failing = set(batch["failing"])

    def answer(index: int, request: dict[str, Any]) -> spool.Answered:
        custom_id = request["custom_id"]
        result: dict[str, Any]
        if index in failing:
            api_error = {"type": "api_error", "message": "Internal server error"}
            result = {"type": "errored", "error": {"type": "error", "error": api_error, "request_id": None}}
        elif not served("anthropic", request["params"]["model"], config.models):
            error = {"type": "error", "error": anthropic_refusal(request["params"]["model"]), "request_id": None}
            result = {"type": "errored", "error": error}
        elif problem := _param_problem(request["params"], batch.get("version", API_VERSION)):
            invalid = {"type": "invalid_request_error", "message": problem}
            result = {"type": "errored", "error": {"type": "error", "error": invalid, "request_id": None}}
        else:
            share = config.responder.reasoning_share
            message = anthropic_message(request["params"], responder, "batch:" + custom_id, share)
            usage = message["usage"]
            usage.update(store.caches.anthropic(request["params"], usage["input_tokens"], now))
            result = {"type": "succeeded", "message": message}
        return "results", {"custom_id": custom_id, "result": result}, {str(result["type"]): 1}

    kind = "expired" if outcome == "expired" else "canceled"

    def unreached(index: int, request: dict[str, Any]) -> spool.Answered:
        return "results", {"custom_id": request["custom_id"], "result": {"type": kind}}, {kind: 1}

    with store.lock:
        if batch["final"] is not None:  # another look ended it meanwhile
            return
        moved = spool.advance(store, batch["work"], done, answer, config.timing.look_seconds)
        if now >= end and batch["work"]["answered"] >= done:  # ends once the answering has caught up
            names = {"results": (f"{batch['id']}_results.jsonl", "batch_results", "results-")}
            kept = spool.finish(store, batch["work"], unreached, f"{config.seed}:{batch['id']}", names, int(end))
            counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
            counts.update({k: v for k, v in batch["work"]["tally"].items() if k in counts})
            batch["final"] = {"counts": counts, "ended": end, "results_file": kept["results"].id}
            moved = True
        if moved:
            store.save()


def _param_problem(params: dict[str, Any], version: str) -> str | None:
    """Problems the real API reports per request, inside the results (a batch's params are checked as a Messages
    call's, by its version and model: one refused parameter errors every line that carries it)."""
    if not isinstance(params.get("max_tokens"), int) or params["max_tokens"] < 1:
        return "max_tokens: Input should be a positive integer"
    messages = params.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    if messages[0].get("role") != "user":
        return 'messages: first message must use the "user" role'
    refused = refusals(params, version)
    return refused[0].message if refused else breakpoint_problem(params)
