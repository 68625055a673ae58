"""Mistral's routes (base URL `http://HOST:PORT/mistral`, as the mistralai SDK's `server_url`: the prefix keeps them
apart from OpenAI's `/v1/files`): files (multipart upload, metadata, content, delete), batch jobs (`mistral_batches`:
create, get, list, cancel), chat completions and the list of models (`GET /v1/models`: base model cards). Keys as
`Authorization: Bearer`; a refused key is 401 `{"message": "Unauthorized"}`, other errors `{"object": "error",
"message", "type", "param", "code"}`."""

from __future__ import annotations

import asyncio
import json
import secrets
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nspec.runners.emulator import body_batches, mistral_batches
from nspec.runners.emulator.generation import count_tokens, mistral_completion
from nspec.runners.emulator.models import listed
from nspec.runners.emulator.routes import Api, ApiError, Dialect, Dropped, limit_param
from nspec.runners.emulator.state import StoredFile

PREFIX = "/mistral"
# The endpoints a batch job may name (docs.mistral.ai/capabilities/batch); this emulator answers chat completions.
ENDPOINTS = ("/v1/chat/completions",)


def _authenticate(request: Request, expected: str | None) -> None:
    auth = request.headers.get("authorization", "")
    bearer = auth[7:] if auth.lower().startswith("bearer ") else ""
    if not bearer or (expected is not None and bearer != expected):
        raise ApiError(401, "unauthorized", "Unauthorized")


def _error_body(error: ApiError, request_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    if error.status == 401:  # Mistral's gateway answers a refused key with a bare message
        return {"message": error.message, "request_id": request_id}, {}
    body = {"object": "error", "message": error.message, "type": error.kind, "param": error.param, "code": error.code}
    return body, {"x-kong-request-id": request_id}


DIALECT = Dialect(
    name="mistral",
    prefix=f"{PREFIX}/",
    not_found="not_found",
    error_body=_error_body,
    authenticate=_authenticate,
    server_error=ApiError(500, "internal_server_error", "Internal server error", code="3000"),
    overloaded=ApiError(503, "service_unavailable", "Service unavailable: the model is overloaded", code="3505"),
    rate_limited=lambda model, wait: ApiError(429, "rate_limited", "Requests rate limit exceeded", code="1300"),
    bad_json=ApiError(422, "invalid_request_error", "Invalid JSON body", code="2000"),
)
DIALECTS = (DIALECT,)


def invalid_model(model: str) -> ApiError:
    """Mistral's refusal of a model it does not have: 400, type `invalid_model`, code 1500."""
    return ApiError(400, "invalid_model", f"Invalid model: {model}", code="1500")


def _file(stored: StoredFile) -> dict[str, Any]:
    sample_type = {"batch": "batch_request", "batch_result": "batch_result"}.get(stored.purpose, "batch_result")
    return {
        "id": stored.id,
        "object": "file",
        "size_bytes": stored.size,
        "created_at": stored.created_at,
        "filename": stored.filename,
        "purpose": "batch",
        "sample_type": sample_type,
        "source": "upload" if stored.purpose == "batch" else "mistral",
        "num_lines": None,
        "mimetype": "application/jsonl",
        "signature": None,
        "expires_at": None,
        "visibility": "user",
    }


def routes(api: Api) -> list[Route]:
    return [
        api.route("mistral", method, PREFIX + path, partial(handler, api), live)
        for method, path, handler, live in (
            ("POST", "/v1/files", upload, False),
            ("GET", "/v1/files/{file_id}", get_file, False),
            ("GET", "/v1/files/{file_id}/content", file_content, False),
            ("DELETE", "/v1/files/{file_id}", delete_file, False),
            ("POST", "/v1/batch/jobs", create_job, False),
            ("GET", "/v1/batch/jobs/{job_id}", get_job, False),
            ("POST", "/v1/batch/jobs/{job_id}/cancel", cancel_job, False),
            ("GET", "/v1/batch/jobs", list_jobs, False),
            ("POST", "/v1/chat/completions", chat, True),
            ("GET", "/v1/models", list_models, False),
        )
    ]


async def upload(api: Api, request: Request) -> Response:
    emu = api.emu
    form = await request.form()
    part = form.get("file")
    if part is None or isinstance(part, str):
        raise ApiError(422, "invalid_request_error", "file: Field required", "file", "2000")
    if form.get("purpose", "fine-tune") != "batch":
        raise ApiError(422, "invalid_request_error", "purpose: this emulator takes batch files only", "purpose")
    data = await part.read()
    stored = emu.store.put_file(part.filename or "upload.jsonl", "batch", data, int(emu.clock.now()), prefix="")
    return JSONResponse(_file(stored))


def stored_file(api: Api, file_id: str) -> StoredFile:
    stored = api.emu.store.files.get(file_id)
    if stored is None:
        raise ApiError(404, "not_found", f"File {file_id} not found", code="1003")
    return stored


async def get_file(api: Api, request: Request) -> Response:
    return JSONResponse(_file(stored_file(api, request.path_params["file_id"])))


async def file_content(api: Api, request: Request) -> Response:
    emu = api.emu
    stored = stored_file(api, request.path_params["file_id"])
    data = emu.store.read_file(stored.id)
    if emu.roll(api.config.faults.truncate_rate):
        return Dropped(data, "application/octet-stream")
    return Response(data, media_type="application/octet-stream")


async def delete_file(api: Api, request: Request) -> Response:
    stored = stored_file(api, request.path_params["file_id"])
    api.emu.store.delete_file(stored.id)
    return JSONResponse({"id": stored.id, "object": "file", "deleted": True})


async def create_job(api: Api, request: Request) -> Response:
    emu, config = api.emu, api.config
    body = await api.json_body(request, "mistral")
    if not isinstance(body, dict):
        raise DIALECT.bad_json
    files = body.get("input_files")
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        raise ApiError(422, "invalid_request_error", "input_files: Field required", "input_files", "2000")
    if body.get("endpoint") not in ENDPOINTS:
        raise ApiError(
            422, "invalid_request_error", f"endpoint: Input should be one of {', '.join(ENDPOINTS)}", "endpoint"
        )
    model = body.get("model")
    if not isinstance(model, str) or not api.serves("mistral", model):
        raise invalid_model(str(model))
    metadata = body.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, dict) or any(not isinstance(v, str) for v in metadata.values())
    ):
        raise ApiError(422, "invalid_request_error", "metadata: values must be strings", "metadata", "2000")
    for file_id in files:
        stored_file(api, file_id)
    fields = {"model": model, "metadata": metadata}
    job = body_batches.create(emu.store, config, emu.rng, mistral_batches.KIND, files, fields, emu.clock.now())
    return JSONResponse(job_view(api, job))


def job_view(api: Api, job: dict[str, Any]) -> dict[str, Any]:
    emu = api.emu
    return mistral_batches.view(emu.store, job, api.config, emu.clock.now(), emu.responder)


def stored_job(api: Api, job_id: str) -> dict[str, Any]:
    found = api.emu.store.mistral_batches.get(job_id)
    if found is None:
        raise ApiError(404, "not_found", f"Batch job {job_id} not found", code="1003")
    return found


async def get_job(api: Api, request: Request) -> Response:
    return JSONResponse(job_view(api, stored_job(api, request.path_params["job_id"])))


async def cancel_job(api: Api, request: Request) -> Response:
    found = stored_job(api, request.path_params["job_id"])
    body_batches.cancel(api.emu.store, found, api.emu.clock.now())
    return JSONResponse(job_view(api, found))


async def list_jobs(api: Api, request: Request) -> Response:
    emu = api.emu
    size = limit_param(request.query_params.get("page_size"), 100)
    try:
        page = max(0, int(request.query_params.get("page", "0")))
    except ValueError:
        raise ApiError(422, "invalid_request_error", "page: Input should be a valid integer", "page") from None
    jobs = sorted(emu.store.mistral_batches.values(), key=lambda j: j["created"], reverse=True)
    model = request.query_params.get("model")
    if model:
        jobs = [j for j in jobs if j["model"] == model]
    now = emu.clock.now()
    data = [mistral_batches.view(emu.store, j, api.config, now, emu.responder) for j in jobs[page * size :][:size]]
    return JSONResponse({"object": "list", "data": data, "total": len(jobs)})


async def chat(api: Api, request: Request) -> Response:
    emu, config = api.emu, api.config
    body = await api.json_body(request, "mistral")
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise ApiError(422, "invalid_request_error", "model: Field required", "model", "2000")
    problem = mistral_batches.line_problem(body, config)
    if problem is not None:
        status, message = problem
        if status == 400:
            raise invalid_model(str(body.get("model")))
        raise ApiError(status, "invalid_request_error", message, code="2000")
    if body.get("stream"):
        raise ApiError(422, "invalid_request_error", "This emulator does not stream.", "stream")
    prompt = sum(count_tokens(json.dumps(m.get("content"))) for m in body["messages"])
    headers = api.live_limit("mistral", body, prompt, int(body.get("max_tokens") or 0))
    await asyncio.sleep(config.timing.live_latency_seconds)
    completion = mistral_completion(body, emu.responder, "live:" + secrets.token_hex(8), int(emu.clock.now()))
    emu.answered["mistral"] += 1
    return JSONResponse(completion, headers=headers)


async def list_models(api: Api, request: Request) -> Response:
    """`{"object": "list", "data": [card]}`: a base model card per model (docs.mistral.ai/api, "List Models"), each
    name its own card."""
    now = int(api.emu.clock.now())
    capabilities = {"completion_chat": True, "function_calling": True, "completion_fim": False, "vision": False}
    data: list[dict[str, Any]] = [
        {
            "id": name,
            "object": "model",
            "created": now,
            "owned_by": "mistralai",
            "capabilities": capabilities,
            "name": name,
            "description": None,
            "max_context_length": 131072,
            "aliases": [],
            "deprecation": None,
            "default_model_temperature": 0.3,
            "type": "base",
        }
        for name in listed("mistral", api.config.models)
    ]
    return JSONResponse({"object": "list", "data": data})
