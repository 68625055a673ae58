"""Together's routes (base URL `http://HOST:PORT/together`, as the together SDK's `base_url`): files uploaded the
SDK's way (`POST /v1/files` answers 302 with the storage URL and `X-Together-File-Id`; the bytes are PUT there; then
`POST /v1/files/{id}/preprocess`), file metadata and content, batches (`together_batches`: create answers `{job,
warning}`, get, list, cancel), chat completions and the list of models (`GET /v1/models`: a bare JSON array). Keys as
`Authorization: Bearer`; errors as `{"error": {message, type, param, code}}`."""

from __future__ import annotations

import asyncio
import json
import secrets
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nspec.runners.emulator import body_batches, together_batches
from nspec.runners.emulator.generation import count_tokens, together_completion
from nspec.runners.emulator.models import listed
from nspec.runners.emulator.routes import Api, ApiError, Dialect, Dropped, retry_headers
from nspec.runners.emulator.state import StoredFile

PREFIX = "/together"
ENDPOINT = "/v1/chat/completions"
_UPLOAD = f"{PREFIX}/upload/"


def _authenticate(request: Request, expected: str | None) -> None:
    if request.url.path.startswith(_UPLOAD):
        return  # a storage URL is its own credential: the SDK PUTs the bytes there without the key
    auth = request.headers.get("authorization", "")
    bearer = auth[7:] if auth.lower().startswith("bearer ") else ""
    if not bearer or (expected is not None and bearer != expected):
        raise ApiError(401, "invalid_request_error", "Invalid API key provided.", code="invalid_api_key")


def _error_body(error: ApiError, request_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    body = {"error": {"message": error.message, "type": error.kind, "param": error.param, "code": error.code}}
    return body, {"x-request-id": request_id}


DIALECT = Dialect(
    name="together",
    prefix=f"{PREFIX}/",
    not_found="invalid_request_error",
    error_body=_error_body,
    authenticate=_authenticate,
    server_error=ApiError(500, "server_error", "Internal server error"),
    overloaded=ApiError(503, "server_error", "The server is overloaded or not ready yet."),
    rate_limited=lambda model, wait: ApiError(
        429, "rate_limit_exceeded", "Rate limit exceeded", code="rate_limit_exceeded", headers=retry_headers(wait)
    ),
    bad_json=ApiError(400, "invalid_request_error", "Could not parse the JSON body."),
)
DIALECTS = (DIALECT,)


def _file(stored: StoredFile) -> dict[str, Any]:
    return {
        "id": stored.id,
        "object": "file",
        "bytes": stored.size,
        "created_at": stored.created_at,
        "filename": stored.filename,
        "FileType": "jsonl",
        "purpose": "batch-api",
        "processing_status": "COMPLETED",
    }


def routes(api: Api) -> list[Route]:
    return [
        api.route("together", method, path, partial(handler, api), live)
        for method, path, handler, live in (
            ("POST", f"{PREFIX}/v1/files", start_upload, False),
            ("PUT", f"{_UPLOAD}{{file_id}}", put_bytes, False),
            ("POST", f"{PREFIX}/v1/files/{{file_id}}/preprocess", preprocess, False),
            ("GET", f"{PREFIX}/v1/files/{{file_id}}", get_file, False),
            ("GET", f"{PREFIX}/v1/files/{{file_id}}/content", file_content, False),
            ("POST", f"{PREFIX}/v1/batches", create_batch, False),
            ("GET", f"{PREFIX}/v1/batches/{{job_id}}", get_batch, False),
            ("POST", f"{PREFIX}/v1/batches/{{job_id}}/cancel", cancel_batch, False),
            ("GET", f"{PREFIX}/v1/batches", list_batches, False),
            ("POST", f"{PREFIX}/v1/chat/completions", chat, True),
            ("GET", f"{PREFIX}/v1/models", list_models, False),
        )
    ]


async def start_upload(api: Api, request: Request) -> Response:
    form = await request.form()
    purpose, name = form.get("purpose"), form.get("file_name")
    if purpose != "batch-api":
        raise ApiError(400, "invalid_request_error", f"This emulator takes batch-api files, not {purpose!r}.")
    if not isinstance(name, str) or not name:
        raise ApiError(400, "invalid_request_error", "file_name is required.", "file_name")
    file_id = f"file-{secrets.token_hex(12)}"
    api.emu.store.uploads[file_id] = {"name": name, "data": None}
    location = f"{request.base_url}{_UPLOAD.lstrip('/')}{file_id}"
    return Response(b"", status_code=302, headers={"Location": location, "X-Together-File-Id": file_id})


async def put_bytes(api: Api, request: Request) -> Response:
    session = api.emu.store.uploads.get(request.path_params["file_id"])
    if session is None:
        raise ApiError(404, "invalid_request_error", "No such upload.")
    session["data"] = await request.body()
    return Response(b"", status_code=200)


async def preprocess(api: Api, request: Request) -> Response:
    emu = api.emu
    file_id = request.path_params["file_id"]
    session = emu.store.uploads.get(file_id)
    if session is None or session["data"] is None:
        raise ApiError(404, "invalid_request_error", f"File {file_id} was not uploaded.")
    del emu.store.uploads[file_id]
    data = session["data"]
    stored = emu.store.put_file(session["name"], "batch", data, int(emu.clock.now()), file_id=file_id)
    return JSONResponse(_file(stored))


def stored_file(api: Api, file_id: str) -> StoredFile:
    stored = api.emu.store.files.get(file_id)
    if stored is None:
        raise ApiError(404, "invalid_request_error", f"File {file_id} not found.")
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


def now_view(api: Api, job: dict[str, Any]) -> dict[str, Any]:
    emu = api.emu
    return together_batches.view(emu.store, job, api.config, emu.clock.now(), emu.responder)


async def create_batch(api: Api, request: Request) -> Response:
    emu = api.emu
    body = await api.json_body(request, "together")
    if not isinstance(body, dict) or not isinstance(body.get("input_file_id"), str):
        raise ApiError(400, "invalid_request_error", "input_file_id is required.", "input_file_id")
    if body.get("endpoint") != ENDPOINT:
        raise ApiError(400, "invalid_request_error", f"endpoint must be {ENDPOINT}.", "endpoint")
    stored = stored_file(api, body["input_file_id"])
    fields = {"model": body.get("model_id"), "file_size": stored.size}
    kind = together_batches.KIND
    job = body_batches.create(emu.store, api.config, emu.rng, kind, [stored.id], fields, emu.clock.now())
    return JSONResponse({"job": now_view(api, job), "warning": None}, status_code=201)


def stored_job(api: Api, job_id: str) -> dict[str, Any]:
    found = api.emu.store.together_batches.get(job_id)
    if found is None:
        raise ApiError(404, "invalid_request_error", f"Batch {job_id} not found.")
    return found


async def get_batch(api: Api, request: Request) -> Response:
    return JSONResponse(now_view(api, stored_job(api, request.path_params["job_id"])))


async def cancel_batch(api: Api, request: Request) -> Response:
    found = stored_job(api, request.path_params["job_id"])
    body_batches.cancel(api.emu.store, found, api.emu.clock.now())
    return JSONResponse(now_view(api, found))


async def list_batches(api: Api, request: Request) -> Response:
    jobs = sorted(api.emu.store.together_batches.values(), key=lambda j: j["created"], reverse=True)
    return JSONResponse([now_view(api, j) for j in jobs])


async def chat(api: Api, request: Request) -> Response:
    emu, config = api.emu, api.config
    body = await api.json_body(request, "together")
    problem = together_batches.line_problem(body, config)
    if problem is not None:
        status, message = problem
        error = together_batches.error_body(status, message)["error"]
        raise ApiError(status, error["type"], message, code=error["code"])
    if body.get("stream"):
        raise ApiError(400, "invalid_request_error", "This emulator does not stream.", "stream")
    prompt = sum(count_tokens(json.dumps(m.get("content"))) for m in body["messages"])
    headers = api.live_limit("together", body, prompt, int(body.get("max_tokens") or 0))
    await asyncio.sleep(config.timing.live_latency_seconds)
    completion = together_completion(body, emu.responder, "live:" + secrets.token_hex(8), int(emu.clock.now()))
    emu.answered["together"] += 1
    return JSONResponse(completion, headers=headers)


async def list_models(api: Api, request: Request) -> Response:
    """A bare JSON array of ModelInfo (docs.together.ai/reference/models-1: `id`, `object`, `created`, `type`, and the
    model's name, owner, context length and prices), not OpenAI's `{"data": [...]}`."""
    now = int(api.emu.clock.now())
    pricing = {"hourly": 0, "input": 0.2, "output": 0.2, "base": 0, "finetune": 0}
    models = [
        {
            "id": name,
            "object": "model",
            "created": now,
            "type": "chat",
            "display_name": name.rsplit("/", 1)[-1],
            "organization": name.split("/", 1)[0],
            "link": f"https://huggingface.co/{name}",
            "license": "other",
            "context_length": 131072,
            "pricing": pricing,
        }
        for name in listed("together", api.config.models)
    ]
    return JSONResponse(models)
