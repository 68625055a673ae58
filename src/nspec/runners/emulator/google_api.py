"""Gemini's routes (base URL `http://HOST:PORT/google`, as the google-genai SDK's `http_options.base_url`: the prefix
keeps them apart from OpenAI's, which share `/v1/files` and `/v1/batches`), under `/v1` and `/v1beta`: resumable file
uploads (`/upload/v1/files`, then the session URL it returns), files (metadata, download, delete),
`models/{model}:generateContent`, `:countTokens` and `:batchGenerateContent`, the list of models (`GET models`, a page
at a time), and batches (get, list, cancel, delete). Keys in `x-goog-api-key` (or `?key=`); errors as `{"error": {code,
message, status}}`.
"""

from __future__ import annotations

import asyncio
import secrets
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nspec.runners.emulator import google_batches
from nspec.runners.emulator.anthropic_batches import rfc3339
from nspec.runners.emulator.caching import google_cached
from nspec.runners.emulator.generation import google_prompt_tokens, google_response
from nspec.runners.emulator.models import google_refusal, listed
from nspec.runners.emulator.routes import Api, ApiError, Dialect, limit_param

PREFIX = "/google"
VERSIONS = ("v1", "v1beta")


def _authenticate(request: Request, expected: str | None) -> None:
    if request.url.path.startswith(f"{PREFIX}/upload/") and "upload_id" in request.query_params:
        return  # an upload session's URL is its own credential: the SDK sends the chunks without the key
    key = request.headers.get("x-goog-api-key") or request.query_params.get("key") or ""
    if not key or (expected is not None and key != expected):
        raise ApiError(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")


def _error_body(error: ApiError, request_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    body: dict[str, Any] = {"code": error.status, "message": error.message, "status": error.kind}
    if error.details:
        body["details"] = error.details
    return {"error": body}, {}


def _rate_limited(model: str, wait: float) -> ApiError:
    """Gemini's 429: no retry header; the delay is a RetryInfo detail, a protobuf Duration ("0.250s")."""
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{wait:.3f}s"}
    return ApiError(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).", details=[retry])


DIALECT = Dialect(
    name="google",
    prefix=f"{PREFIX}/",
    not_found="NOT_FOUND",
    error_body=_error_body,
    authenticate=_authenticate,
    server_error=ApiError(500, "INTERNAL", "An internal error has occurred. Please retry or report it."),
    overloaded=ApiError(503, "UNAVAILABLE", "The model is overloaded. Please try again later."),
    rate_limited=_rate_limited,
    bad_json=ApiError(400, "INVALID_ARGUMENT", "Invalid JSON payload received."),
)
DIALECTS = (DIALECT,)


def _file(stored: Any, now: float) -> dict[str, Any]:
    return {
        "name": f"files/{stored.id}",
        "displayName": stored.filename,
        "mimeType": "application/jsonl",
        "sizeBytes": str(stored.size),
        "createTime": rfc3339(stored.created_at),
        "updateTime": rfc3339(stored.created_at),
        "expirationTime": rfc3339(stored.created_at + 48 * 3600),
        "uri": f"files/{stored.id}",
        "state": "ACTIVE",
        "source": "UPLOADED",
    }


def routes(api: Api) -> list[Route]:
    """Each version's routes: uploads, files, models and batches."""
    out = []
    for version in VERSIONS:
        base = f"{PREFIX}/{version}"
        out += [
            api.route("google", method, path, partial(handler, api), live)
            for method, path, handler, live in (
                ("POST", f"{PREFIX}/upload/{version}/files", upload, False),
                ("GET", f"{base}/files/{{rest}}", files, False),
                ("DELETE", f"{base}/files/{{rest}}", files, False),
                ("POST", f"{base}/models/{{rest}}", models, True),
                ("GET", f"{base}/models", list_models, False),
                ("GET", f"{base}/batches", list_batches, False),
                ("GET", f"{base}/batches/{{rest}}", batches, False),
                ("POST", f"{base}/batches/{{rest}}", batches, False),
                ("DELETE", f"{base}/batches/{{rest}}", batches, False),
            )
        ]
    return out


def call(request: Request) -> tuple[str, str]:
    """`name:method` from the path's last segment."""
    name, _, method = request.path_params["rest"].partition(":")
    return name, method


async def upload(api: Api, request: Request) -> Response:
    emu = api.emu
    command = request.headers.get("x-goog-upload-command", "")
    if "start" in command:
        body = await api.json_body(request, "google")
        file = body.get("file") if isinstance(body, dict) else None
        name = (file or {}).get("display_name") or (file or {}).get("displayName") or "upload"
        upload_id = secrets.token_hex(12)
        emu.store.uploads[upload_id] = {"name": name, "data": b""}
        url = f"{request.base_url}{PREFIX.lstrip('/')}/upload/v1/files?upload_id={upload_id}"
        return Response(b"", headers={"x-goog-upload-url": url, "x-goog-upload-status": "active"})
    session = emu.store.uploads.get(request.query_params.get("upload_id", ""))
    if session is None:
        raise ApiError(404, "NOT_FOUND", "No such upload session.")
    offset = int(request.headers.get("x-goog-upload-offset", "0"))
    if offset != len(session["data"]):
        raise ApiError(
            400,
            "INVALID_ARGUMENT",
            f"Upload offset {offset} does not follow the {len(session['data'])} bytes received.",
        )
    session["data"] += await request.body()
    if "finalize" not in command:
        return Response(b"", headers={"x-goog-upload-status": "active"})
    del emu.store.uploads[request.query_params["upload_id"]]
    stored = emu.store.put_file(session["name"], "batch", session["data"], int(emu.clock.now()), prefix="")
    return JSONResponse({"file": _file(stored, emu.clock.now())}, headers={"x-goog-upload-status": "final"})


async def files(api: Api, request: Request) -> Response:
    emu = api.emu
    name, method = call(request)
    stored = emu.store.files.get(name)
    if stored is None:
        raise ApiError(404, "NOT_FOUND", f"File {name} does not exist.")
    if request.method == "DELETE":
        emu.store.delete_file(stored.id)
        return JSONResponse({})
    if method == "download":
        return Response(emu.store.read_file(stored.id), media_type="application/octet-stream")
    return JSONResponse(_file(stored, emu.clock.now()))


async def models(api: Api, request: Request) -> Response:
    emu, config = api.emu, api.config
    model, method = call(request)
    body = await api.json_body(request, "google")
    if method not in ("generateContent", "countTokens", "batchGenerateContent"):
        raise ApiError(404, "NOT_FOUND", f"Method {method} is not found.")
    if not api.serves("google", model):
        raise ApiError(404, "NOT_FOUND", google_refusal(model))
    if method == "batchGenerateContent":
        try:
            job = google_batches.create(emu.store, config, emu.rng, model, body, emu.clock.now())
        except google_batches.InvalidArgument as exc:
            raise ApiError(400, "INVALID_ARGUMENT", str(exc)) from None
        return JSONResponse(google_batches.operation(emu.store, job, config, emu.clock.now(), emu.responder))
    if method == "countTokens":
        inner = body.get("generateContentRequest") if isinstance(body, dict) else None
        request_body = inner if isinstance(inner, dict) else body
        if not isinstance(request_body, dict) or not isinstance(request_body.get("contents"), list):
            raise ApiError(400, "INVALID_ARGUMENT", "* CountTokensRequest.contents: contents is not specified")
        return JSONResponse({"totalTokens": google_prompt_tokens(request_body)})
    problem = (
        google_batches.request_problem({k: v for k, v in body.items() if k != "model"})
        if isinstance(body, dict)
        else "Invalid JSON payload received."
    )
    if problem is not None:
        raise ApiError(400, "INVALID_ARGUMENT", problem)
    limit = int((body.get("generationConfig") or {}).get("maxOutputTokens") or 0)
    headers = api.live_limit("google", {"model": model}, google_prompt_tokens(body), limit)
    await asyncio.sleep(config.timing.live_latency_seconds)
    emu.answered["google"] += 1
    asked = {**body, "model": model}
    share = config.responder.reasoning_share
    response = google_response(asked, emu.responder, "live:" + secrets.token_hex(8), share)
    google_cached(emu.store.caches, asked, response, emu.clock.now())
    return JSONResponse(response, headers=headers)


def _page(request: Request, names: list[Any]) -> tuple[list[Any], str | None]:
    """One page of ``names`` as Google's list methods give it (`pageSize`, at most 1000; `pageToken`, from the last
    page's `nextPageToken`), and the token of the next page (None: the last)."""
    size = limit_param(request.query_params.get("pageSize"), 50)
    token = request.query_params.get("pageToken") or "0"
    if not token.isdigit():
        raise ApiError(400, "INVALID_ARGUMENT", "Invalid page token.")
    start = int(token)
    return names[start : start + size], (str(start + size) if start + size < len(names) else None)


async def list_models(api: Api, request: Request) -> Response:
    """`{"models": [Model], "nextPageToken"?}` (ai.google.dev/api/models#method:-models.list): each model named
    `models/<id>`, 50 a page unless `pageSize` says."""
    page, token = _page(request, listed("google", api.config.models))
    methods = ["generateContent", "countTokens", "createCachedContent", "batchGenerateContent"]
    out: dict[str, Any] = {
        "models": [
            {
                "name": f"models/{name}",
                "version": "001",
                "displayName": name,
                "description": f"The emulator's {name}",
                "inputTokenLimit": 1048576,
                "outputTokenLimit": 65536,
                "supportedGenerationMethods": methods,
                "temperature": 1,
                "topP": 0.95,
                "topK": 64,
                "maxTemperature": 2,
            }
            for name in page
        ]
    }
    if token is not None:
        out["nextPageToken"] = token
    return JSONResponse(out)


def job(api: Api, name: str) -> dict[str, Any]:
    found = api.emu.store.google_batches.get(name)
    if found is None:
        raise ApiError(404, "NOT_FOUND", f"Batch batches/{name} does not exist.")
    return found


async def batches(api: Api, request: Request) -> Response:
    emu = api.emu
    name, method = call(request)
    found = job(api, name)
    if request.method == "POST" and method == "cancel":
        google_batches.cancel(emu.store, found, emu.clock.now())
        return JSONResponse({})
    if request.method == "DELETE":
        del emu.store.google_batches[name]
        return JSONResponse({})
    return JSONResponse(google_batches.operation(emu.store, found, api.config, emu.clock.now(), emu.responder))


async def list_batches(api: Api, request: Request) -> Response:
    emu = api.emu
    ids = sorted(emu.store.google_batches, key=lambda i: emu.store.google_batches[i]["created"], reverse=True)
    page, token = _page(request, ids)
    now = emu.clock.now()
    out: dict[str, Any] = {
        "operations": [
            google_batches.operation(emu.store, emu.store.google_batches[i], api.config, now, emu.responder)
            for i in page
        ]
    }
    if token is not None:
        out["nextPageToken"] = token
    return JSONResponse(out)
