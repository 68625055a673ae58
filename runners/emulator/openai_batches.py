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
from typing import Any

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
    data: bytes, url: str, flavour: Flavour, config: EmulatorConfig
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The requests of an input file for the batch endpoint ``url`` (as ``flavour`` names it), and the validation
    errors (each naming its 1-based line)."""
    errors: list[dict[str, Any]] = []
    limits = config.limits
    endpoint = flavour.endpoints[url]
    max_lines = flavour.max_lines(config)

    def error(code: str, message: str, line: int | None = None, param: str | None = None) -> None:
        errors.append({"code": code, "message": message, "param": param, "line": line})

    if len(data) > limits.openai_max_bytes:
        error("file_too_large", f"The input file is {len(data)} bytes; the limit is {limits.openai_max_bytes}.")
        return [], errors
    lines = data.decode("utf-8", errors="replace").splitlines()
    if len([ln for ln in lines if ln.strip()]) > max_lines:
        error("too_many_requests", f"The input file has more than {max_lines} requests.")
        return [], errors
    requests: list[dict[str, Any]] = []
    seen: set[str] = set()
    models: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
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
            error("duplicate_custom_id", f"The custom_id '{custom_id}' is used more than once.", number, "custom_id")
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
            continue
        requests.append(obj)
    return requests, errors


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
    data = store.read_file(input_file_id)
    requests, errors = validate_input(data, endpoint, flavour, config)
    if not errors and rng.random() < config.faults.batch_validation_failure_rate:
        errors = [
            {"code": "invalid_request", "message": "Validation failed (injected fault).", "param": None, "line": 1}
        ]
    batch = {
        "id": new_id("batch_"),
        "flavour": flavour.name,
        "input_file_id": input_file_id,
        "endpoint": endpoint,
        "completion_window": completion_window,
        "metadata": metadata,
        "created": now,
        "total": len(requests),
        "model": requests[0]["body"]["model"] if requests else None,
        "errors": errors or None,
        "cancel_at": None,
        "final": None,  # set once terminal: status, times, counts, file ids
        "requests": [] if errors else requests,
        **draw_batch_faults(config.faults, rng, [r["custom_id"] for r in requests]),
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
    """The Batch object as of ``now``; materialises the result files when the batch first reaches its end."""
    if batch["final"] is None:
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
    t = schedule(batch, config.timing)
    if now < t.start:
        return base
    done = t.done_by(batch["total"], now)
    failed = sum(1 for r in batch["requests"][:done] if batch["outcomes"][r["custom_id"]] == "error")
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
    _write_results(store, batch, config, responder, done, outcome, int(end))
    times = {"in_progress_at": int(t.start)}
    if outcome == "completed":
        times.update(finalizing_at=int(t.processed), completed_at=int(end))
    elif outcome == "expired":
        times.update(expired_at=int(end))
    else:
        times.update(cancelling_at=int(batch["cancel_at"]), cancelled_at=int(end))
    batch["final"]["status"] = outcome
    batch["final"].update(times)
    batch["requests"] = []  # the results are in the files now
    store.save()


def _write_results(
    store: Store,
    batch: dict[str, Any],
    config: EmulatorConfig,
    responder: Responder,
    done: int,
    outcome: str,
    end: int,
) -> None:
    flavour = FLAVOURS[batch.get("flavour", "openai")]
    endpoint = flavour.endpoints[batch["endpoint"]]
    ok_lines, error_lines = [], []
    completed = failed = 0
    usage = {"input_tokens": 0, "output_tokens": 0}
    for index, request in enumerate(batch["requests"]):
        custom_id = request["custom_id"]
        line: dict[str, Any] = {"id": new_id("batch_req_"), "custom_id": custom_id}
        if index >= done:
            code = "batch_expired" if outcome == "expired" else "batch_cancelled"
            message = (
                "This request could not be executed before the completion window expired."
                if outcome == "expired"
                else "This request was not executed because the batch was cancelled."
            )
            error_lines.append({**line, "response": None, "error": {"code": code, "message": message}})
            failed += 1
        elif batch["outcomes"][custom_id] == "error":
            body = {
                "error": {
                    "message": "The server had an error processing your request.",
                    "type": "server_error",
                    "param": None,
                    "code": None,
                }
            }
            error_lines.append(
                {
                    **line,
                    "response": {"status_code": 500, "request_id": secrets.token_hex(16), "body": body},
                    "error": None,
                }
            )
            failed += 1
        elif (runs := flavour.model_of(request["body"]["model"], config)) is None:
            response = {
                "status_code": 404,
                "request_id": secrets.token_hex(16),
                "body": missing_model(flavour, request["body"]["model"]),
            }
            error_lines.append({**line, "response": response, "error": None})
            failed += 1
        elif refused := refusals({**request["body"], "model": runs}, endpoint):
            # A parameter the model does not take fails its line (status 400), as the live call would.
            body = {
                "error": {
                    "message": refused[0].message,
                    "type": "invalid_request_error",
                    "param": refused[0].param,
                    "code": refused[0].code,
                }
            }
            response = {"status_code": 400, "request_id": secrets.token_hex(16), "body": body}
            error_lines.append({**line, "response": response, "error": None})
            failed += 1
        else:
            if endpoint == RESPONSES:
                answer = openai_response(request["body"], responder, "batch:" + custom_id, end)
                openai_cached(store.caches, request["body"], answer, end)
                tokens = answer["usage"]["input_tokens"], answer["usage"]["output_tokens"]
            else:
                answer = openai_completion(request["body"], responder, "batch:" + custom_id, end)
                openai_cached(store.caches, request["body"], answer, end)
                tokens = answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"]
            usage["input_tokens"] += tokens[0]
            usage["output_tokens"] += tokens[1]
            ok_lines.append(
                {
                    **line,
                    "response": {"status_code": 200, "request_id": secrets.token_hex(16), "body": answer},
                    "error": None,
                }
            )
            completed += 1
    shuffle = random.Random(f"{config.seed}:{batch['id']}")
    final: dict[str, Any] = {
        "request_counts": {"total": batch["total"], "completed": completed, "failed": failed},
        "usage": {
            **usage,
            "total_tokens": usage["input_tokens"] + usage["output_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }
    for name, lines in (("output_file_id", ok_lines), ("error_file_id", error_lines)):
        if lines:
            shuffle.shuffle(lines)
            data = "".join(json.dumps(line) + "\n" for line in lines).encode()
            purpose = "batch_output"
            final[name] = store.put_file(f"{batch['id']}_{name[:-8]}.jsonl", purpose, data, end).id
    batch["final"] = final
