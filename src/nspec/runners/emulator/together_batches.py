"""Together batch jobs (docs.together.ai/docs/inference/batch) over `body_batches`: VALIDATING → IN_PROGRESS
(`progress` from 0 to 100) → COMPLETED, or FAILED (a malformed file), EXPIRED, CANCELLED keeping what finished;
RFC 3339 times; no metadata."""

from __future__ import annotations

from typing import Any

from nspec.runners.emulator import body_batches
from nspec.runners.emulator.anthropic_batches import rfc3339
from nspec.runners.emulator.config import EmulatorConfig
from nspec.runners.emulator.generation import together_completion
from nspec.runners.emulator.models import served
from nspec.runners.emulator.responders import Responder
from nspec.runners.emulator.state import Store

_STATUS = {"done": "COMPLETED", "expired": "EXPIRED", "cancelled": "CANCELLED", "failed": "FAILED"}


def model_refusal(model: str) -> str:
    return (
        f"Unable to access model {model}. Please visit https://api.together.ai/models to view the list of supported "
        "models."
    )


def line_problem(body: Any, config: EmulatorConfig) -> tuple[int, str] | None:
    """What Together answers one request with, when it refuses it: (status, message)."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        return 400, "messages: field required"
    if not isinstance(body.get("model"), str) or not served("together", body["model"], config.models):
        return 404, model_refusal(str(body.get("model")))
    limit = body.get("max_tokens")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        return 400, "max_tokens must be a positive integer"
    return None


def error_body(status: int, message: str) -> dict[str, Any]:
    code = "model_not_available" if status == 404 else None
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


KIND = body_batches.Kind("together_batches", 50_000, line_problem, together_completion, error_body)


def view(store: Store, job: dict[str, Any], config: EmulatorConfig, now: float, responder: Responder) -> dict[str, Any]:
    """The BatchJob object as of ``now``."""
    t, done = body_batches.progress(store, KIND, job, config, now, responder)
    base: dict[str, Any] = {
        "id": job["id"],
        "user_id": "user-emulated",
        "input_file_id": job["input_files"][0],
        "file_size_bytes": job["file_size"],
        "status": "VALIDATING",
        "job_deadline": rfc3339(job["created"] + config.timing.completion_window_seconds),
        "created_at": rfc3339(job["created"]),
        "endpoint": "/v1/chat/completions",
        "progress": 0.0,
        "model_id": job.get("model"),
        "output_file_id": None,
        "error_file_id": None,
        "error": "; ".join(e["message"] for e in job["errors"]) or None,
        "completed_at": None,
    }
    final = job["final"]
    if final is not None:
        base.update(status=_STATUS[final["status"]], completed_at=rfc3339(final["ended"]))
        if final["status"] != "failed":
            base.update(
                progress=100.0 * final["done"] / max(1, job["total"]),
                output_file_id=final["output_file"],
                error_file_id=final["error_file"],
            )
        return base
    if job["errors"] or now < t.start:
        return base
    base.update(status="IN_PROGRESS", progress=round(100.0 * done / max(1, job["total"]), 2))
    return base
