"""Mistral batch jobs (docs.mistral.ai/capabilities/batch) over `body_batches`: QUEUED → RUNNING (counts move) →
SUCCESS; a job asked to cancel is CANCELLATION_REQUESTED, then CANCELLED keeping what finished; one whose time runs
out is TIMEOUT_EXCEEDED; one over a malformed file FAILED. Unix-second timestamps."""

from __future__ import annotations

from typing import Any

from nspec.runners.emulator import body_batches
from nspec.runners.emulator.config import EmulatorConfig
from nspec.runners.emulator.generation import mistral_completion
from nspec.runners.emulator.models import served
from nspec.runners.emulator.responders import Responder
from nspec.runners.emulator.state import Store
from nspec.runners.providers.mistral import REQUEST_FIELDS

_STATUS = {"done": "SUCCESS", "expired": "TIMEOUT_EXCEEDED", "cancelled": "CANCELLED", "failed": "FAILED"}


def line_problem(body: Any, config: EmulatorConfig) -> tuple[int, str] | None:
    """What Mistral answers one request with, when it refuses it: (status, message)."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        return 422, "messages: Field required"
    unknown = sorted(set(body) - REQUEST_FIELDS)
    if unknown:
        return 422, f"{unknown[0]}: Extra inputs are not permitted"
    name = body.get("model")
    if name is not None and (not isinstance(name, str) or not served("mistral", name, config.models)):
        return 400, f"Invalid model: {name}"
    limit = body.get("max_tokens")
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        return 422, "max_tokens: Input should be greater than or equal to 0"
    return None


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"object": "error", "message": message, "type": "invalid_request_error", "param": None, "code": None}


KIND = body_batches.Kind("mistral_batches", 1_000_000, line_problem, mistral_completion, error_body)


def view(store: Store, job: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder) -> dict[str, Any]:
    """The BatchJob object as of ``now``."""
    t, done = body_batches.progress(store, KIND, job, config, now, responder)
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
    final = job["final"]
    if final is not None:
        base.update(status=_STATUS[final["status"]], completed_at=int(final["ended"]))
        if final["status"] != "failed":
            base.update(
                started_at=int(final["started"]),
                completed_requests=final["done"],
                succeeded_requests=final["succeeded"],
                failed_requests=final["failed"],
                output_file=final["output_file"],
                error_file=final["error_file"],
            )
        return base
    if job["errors"] or now < t.start:
        return base
    base.update(status="RUNNING", started_at=int(t.start), completed_requests=done, succeeded_requests=done)
    if job["cancel_at"] is not None:
        base["status"] = "CANCELLATION_REQUESTED"
    return base
