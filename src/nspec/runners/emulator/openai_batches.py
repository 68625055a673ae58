"""OpenAI batches: input validation, a lifecycle derived from the clock, output and error files.

validating → in_progress (request_counts move) → finalizing → completed; or failed (validation errors, naming the
line); expired (the completion window closed: unfinished requests come back as `batch_expired` error lines);
cancelling → cancelled (finished requests kept, the rest `batch_cancelled`). Success lines go to the output file,
failures to a separate error file, each in shuffled order. Timestamps are Unix seconds.
"""

from __future__ import annotations

import json
import random
import secrets
from pathlib import Path
from typing import Any

from nspec.runners.emulator import spool
from nspec.runners.emulator.caching import openai_cached
from nspec.runners.emulator.config import EmulatorConfig, draw_batch_faults, schedule
from nspec.runners.emulator.flavours import FLAVOURS, Flavour
from nspec.runners.emulator.generation import openai_completion, openai_response
from nspec.runners.emulator.models import openai_refusal
from nspec.runners.emulator.responders import Responder
from nspec.runners.emulator.state import Store, new_id
from nspec.runners.providers.openai_models import RESPONSES, refusals


def missing_model(flavour: Flavour, model: str) -> dict[str, Any]:
    """The service's error body for a model it does not run (status 404)."""
    if flavour.name == "azure":
        message = (
            "The API deployment for this resource does not exist. If you created the deployment within the last 5 "
            "minutes, please wait a moment and try again."
        )
        return {"error": {"code": "DeploymentNotFound", "message": message}}
    return openai_refusal(model)


def validate_input(
    path: Path, url: str, flavour: Flavour, config: EmulatorConfig
) -> tuple[int, str | None, list[dict[str, Any]]]:
    """How many requests the input file at ``path`` holds for the batch endpoint ``url`` (as ``flavour`` names it),
    their model, and the validation errors (each naming its 1-based line). Read a line at a time."""
    errors: list[dict[str, Any]] = []
    limits = config.limits
    endpoint = flavour.endpoints[url]
    max_lines = flavour.max_lines(config)

    def error(code: str, message: str, line: int | None = None, param: str | None = None) -> None:
        errors.append({"code": code, "message": message, "param": param, "line": line})

    size = path.stat().st_size
    if size > limits.openai_max_bytes:
        error("file_too_large", f"The input file is {size} bytes; the limit is {limits.openai_max_bytes}.")
        return 0, None, errors
    count = 0
    seen: set[str] = set()
    models: set[str] = set()
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            line = raw.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            if count == max_lines:
                return (
                    0,
                    None,
                    [
                        {
                            "code": "too_many_requests",
                            "message": f"The input file has more than {max_lines} requests.",
                            "param": None,
                            "line": None,
                        }
                    ],
                )
            count += 1
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                error("invalid_json_line", "This line is not parseable as valid JSON.", number)
                continue
            if not isinstance(obj, dict):
                error("invalid_json_line", "This line is not a JSON object.", number)
                continue
            custom_id = obj.get("custom_id")
            if not isinstance(custom_id, str) or not custom_id:
                error("missing_required_parameter", "Missing required parameter: 'custom_id'.", number, "custom_id")
                continue
            if custom_id in seen:
                error(
                    "duplicate_custom_id", f"The custom_id '{custom_id}' is used more than once.", number, "custom_id"
                )
                continue
            seen.add(custom_id)
            if obj.get("method") != "POST":
                error("invalid_method", "The method must be POST.", number, "method")
                continue
            if obj.get("url") != url:
                error("invalid_url", f"The url must match the batch endpoint {url}.", number, "url")
                continue
            body = obj.get("body")
            needed = "input" if endpoint == RESPONSES else "messages"
            if (
                not isinstance(body, dict)
                or not isinstance(body.get("model"), str)
                or not isinstance(body.get(needed), list | str if endpoint == RESPONSES else list)
            ):
                error("invalid_request", f"The body must have a model and {needed}.", number, "body")
                continue
            models.add(body["model"])
            if len(models) > 1:
                error("mismatched_model", "All requests in a batch must use the same model.", number, "body.model")
    return count, min(models) if len(models) == 1 else None, errors


def create(
    store: Store,
    config: EmulatorConfig,
    rng: random.Random,
    flavour: Flavour,
    input_file_id: str,
    endpoint: str,
    completion_window: str,
    metadata: dict[str, str] | None,
    now: float,
) -> dict[str, Any]:
    total, model, errors = validate_input(store.path(input_file_id), endpoint, flavour, config)
    if not errors and rng.random() < config.faults.batch_validation_failure_rate:
        errors = [
            {"code": "invalid_request", "message": "Validation failed (injected fault).", "param": None, "line": 1}
        ]
    total = 0 if errors else total
    batch = {
        "id": new_id("batch_"),
        "flavour": flavour.name,
        "input_file_id": input_file_id,
        "endpoint": endpoint,
        "completion_window": completion_window,
        "metadata": metadata,
        "created": now,
        "total": total,
        "model": model,
        "errors": errors or None,
        "cancel_at": None,
        "final": None,  # set once terminal: status, times, counts, file ids
        "work": spool.start(store, input_file_id, ("output", "error"), total),
        **draw_batch_faults(config.faults, rng, total),
    }
    return store.add_batch(store.openai_batches, batch)


def cancel(store: Store, batch: dict[str, Any], config: EmulatorConfig, now: float) -> None:
    with store.lock:
        view = status(store, batch, config, now, responder=None)
        if view["status"] in ("validating", "in_progress", "finalizing") and batch["cancel_at"] is None:
            batch["cancel_at"] = now
            store.save()


def status(
    store: Store, batch: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder | None
) -> dict[str, Any]:
    """The Batch object as of ``now``, answering what its schedule has reached since the last look; materialises the
    result files when the batch first reaches its end (one look at a time: the emulator's worker looks too)."""
    with store.lock:
        return _status(store, batch, config, now, responder)


def _status(
    store: Store, batch: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder | None
) -> dict[str, Any]:
    t = schedule(batch, config.timing)
    # Work stops where the batch expires or is cancelled.
    reach = min(now, t.expire, batch["cancel_at"] if batch["cancel_at"] is not None else now)
    if batch["final"] is None:
        if responder is not None and now >= t.start:
            _answer(store, batch, config, responder, t.done_by(batch["total"], reach), int(now))
        _maybe_finish(store, batch, config, now, responder)
    base = {
        "id": batch["id"],
        "object": "batch",
        "endpoint": batch["endpoint"],
        "model": batch["model"],
        "errors": None,
        "input_file_id": batch["input_file_id"],
        "completion_window": batch["completion_window"],
        "status": "validating",
        "output_file_id": None,
        "error_file_id": None,
        "created_at": int(batch["created"]),
        "in_progress_at": None,
        "expires_at": int(schedule(batch, config.timing).window_end),
        "finalizing_at": None,
        "completed_at": None,
        "failed_at": None,
        "expired_at": None,
        "cancelling_at": None,
        "cancelled_at": None,
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "metadata": batch["metadata"],
        "usage": None,
    }
    if batch["final"] is not None:
        return {**base, **batch["final"]}
    if now < t.start:
        return base
    # What is answered, when the answering lags the clock.
    done = min(t.done_by(batch["total"], reach), batch["work"]["answered"])
    failed = batch["work"]["tally"].get("failed", 0)
    view = {
        **base,
        "in_progress_at": int(t.start),
        "status": "in_progress",
        "request_counts": {"total": batch["total"], "completed": done - failed, "failed": failed},
    }
    if batch["cancel_at"] is not None:
        view.update(status="cancelling", cancelling_at=int(batch["cancel_at"]))
    elif done >= batch["total"]:
        view.update(status="finalizing", finalizing_at=int(t.processed))
    return view


def _maybe_finish(
    store: Store, batch: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder | None
) -> None:
    t = schedule(batch, config.timing)
    if batch["errors"]:
        if now >= t.start:
            batch["final"] = {
                "status": "failed",
                "failed_at": int(t.start),
                "errors": {"object": "list", "data": batch["errors"]},
            }
            store.save()
        return
    candidates = [(t.finalized, "completed"), (t.expire, "expired")]
    if batch["cancel_at"] is not None:
        candidates.append((batch["cancel_at"] + config.timing.cancel_seconds, "cancelled"))
    end, outcome = min(candidates)
    if outcome == "expired" and t.expire >= t.processed:
        end, outcome = t.finalized, "completed"
    if now < end or responder is None:
        return
    if outcome == "completed":
        done = int(batch["total"])
    else:
        done = t.done_by(batch["total"], t.expire if outcome == "expired" else batch["cancel_at"])
    if batch["work"]["answered"] < done:
        return  # the answering lags the clock: the batch ends once it has caught up
    _write_results(store, batch, config, outcome, int(end))
    times = {"in_progress_at": int(t.start)}
    if outcome == "completed":
        times.update(finalizing_at=int(t.processed), completed_at=int(end))
    elif outcome == "expired":
        times.update(expired_at=int(end))
    else:
        times.update(cancelling_at=int(batch["cancel_at"]), cancelled_at=int(end))
    batch["final"]["status"] = outcome
    batch["final"].update(times)
    store.save()


def _answer(
    store: Store, batch: dict[str, Any], config: EmulatorConfig, responder: Responder, upto: int, now: int
) -> None:
    """Answer the batch's requests before index ``upto`` (those its schedule has reached)."""
    flavour = FLAVOURS[batch.get("flavour", "openai")]
    endpoint = flavour.endpoints[batch["endpoint"]]
    failing = set(batch["failing"])
    share = config.responder.reasoning_share

    def answer(index: int, request: dict[str, Any]) -> spool.Answered:
        custom_id = request["custom_id"]
        line: dict[str, Any] = {"id": new_id("batch_req_"), "custom_id": custom_id}
        if index in failing:
            body = {
                "error": {
                    "message": "The server had an error processing your request.",
                    "type": "server_error",
                    "param": None,
                    "code": None,
                }
            }
            return "error", {**line, "response": _response(500, body), "error": None}, {"failed": 1}
        if (runs := flavour.model_of(request["body"]["model"], config)) is None:
            body = missing_model(flavour, request["body"]["model"])
            return "error", {**line, "response": _response(404, body), "error": None}, {"failed": 1}
        if refused := refusals({**request["body"], "model": runs}, endpoint, flavour.strict(runs, config)):
            # A parameter the model does not take fails its line (status 400), as the live call would.
            body = {
                "error": {
                    "message": refused[0].message,
                    "type": "invalid_request_error",
                    "param": refused[0].param,
                    "code": refused[0].code,
                }
            }
            return "error", {**line, "response": _response(400, body), "error": None}, {"failed": 1}
        if endpoint == RESPONSES:
            answer = openai_response(request["body"], responder, "batch:" + custom_id, now, share)
            input_tokens, output_tokens = answer["usage"]["input_tokens"], answer["usage"]["output_tokens"]
        else:
            answer = openai_completion(request["body"], responder, "batch:" + custom_id, now, share)
            input_tokens, output_tokens = answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"]
        openai_cached(store.caches, request["body"], answer, now)
        counts = {"completed": 1, "input_tokens": input_tokens, "output_tokens": output_tokens}
        return "output", {**line, "response": _response(200, answer), "error": None}, counts

    with store.lock:
        if spool.advance(store, batch["work"], upto, answer, config.timing.look_seconds):
            store.save()


def _response(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"status_code": status, "request_id": secrets.token_hex(16), "body": body}


def _write_results(store: Store, batch: dict[str, Any], config: EmulatorConfig, outcome: str, end: int) -> None:
    """The result files of a batch whose reached requests are answered; the rest expired or were cancelled."""
    code = "batch_expired" if outcome == "expired" else "batch_cancelled"
    message = (
        "This request could not be executed before the completion window expired."
        if outcome == "expired"
        else "This request was not executed because the batch was cancelled."
    )

    def unreached(index: int, request: dict[str, Any]) -> spool.Answered:
        line = {"id": new_id("batch_req_"), "custom_id": request["custom_id"], "response": None}
        return "error", {**line, "error": {"code": code, "message": message}}, {"failed": 1}

    work = batch["work"]
    names = {kind: (f"{batch['id']}_{kind}.jsonl", "batch_output", "file-") for kind in ("output", "error")}
    kept = spool.finish(store, work, unreached, f"{config.seed}:{batch['id']}", names, end)
    tally = work["tally"]
    usage = {"input_tokens": tally.get("input_tokens", 0), "output_tokens": tally.get("output_tokens", 0)}
    final: dict[str, Any] = {
        "request_counts": {
            "total": batch["total"],
            "completed": tally.get("completed", 0),
            "failed": tally.get("failed", 0),
        },
        "usage": {
            **usage,
            "total_tokens": usage["input_tokens"] + usage["output_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }
    for kind, stored in kept.items():
        final[f"{kind}_file_id"] = stored.id
    batch["final"] = final
