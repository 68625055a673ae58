"""The routes of the services that speak OpenAI's API (`flavours`: OpenAI at `/v1`, Azure OpenAI at `/azure/openai`,
Groq at `/groq/openai/v1`): files, batches (`openai_batches`), chat completions and responses, each service in its
own dialect (keys, error bodies) and with its own rules (endpoints, windows, models)."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
from dataclasses import replace
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from nspec.runners.emulator import openai_batches
from nspec.runners.emulator.caching import openai_cached
from nspec.runners.emulator.flavours import AZURE, FLAVOURS, GROQ, OPENAI, Flavour
from nspec.runners.emulator.generation import count_tokens, openai_completion, openai_response
from nspec.runners.emulator.models import listed
from nspec.runners.emulator.routes import Api, ApiError, Dialect, Dropped, limit_param, retry_headers
from nspec.runners.emulator.state import StoredFile
from nspec.runners.providers.openai_models import CHAT, RESPONSES, refusals


def _authenticate(request: Request, expected: str | None) -> None:
    auth = request.headers.get("authorization", "")
    bearer = auth[7:] if auth.lower().startswith("bearer ") else ""
    if not bearer or (expected is not None and bearer != expected):
        raise ApiError(
            401,
            "invalid_request_error",
            "Incorrect API key provided." if bearer else "You didn't provide an API key.",
            code="invalid_api_key",
        )


def _groq_authenticate(request: Request, expected: str | None) -> None:
    """OpenAI's check, in Groq's words for a key it does not know: `Invalid API Key` (the same type and code)."""
    try:
        _authenticate(request, expected)
    except ApiError as refused:
        if refused.message != "Incorrect API key provided.":
            raise
        raise ApiError(401, refused.kind, "Invalid API Key", code=refused.code) from None


def _error_body(error: ApiError, request_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    body = {"error": {"message": error.message, "type": error.kind, "param": error.param, "code": error.code}}
    return body, {"x-request-id": request_id}


DIALECT = Dialect(
    name=OPENAI.name,
    prefix="",  # every path no other API claims
    not_found="invalid_request_error",
    error_body=_error_body,
    authenticate=_authenticate,
    server_error=ApiError(500, "server_error", "The server had an error while processing your request."),
    overloaded=ApiError(503, "server_error", "The engine is currently overloaded."),
    rate_limited=lambda model, wait: ApiError(
        429,
        "requests",
        f"Rate limit reached for {model}. Please try again in {wait:.3f}s.",
        code="rate_limit_exceeded",
        headers=retry_headers(wait),
    ),
    bad_json=ApiError(400, "invalid_request_error", "We could not parse the JSON body of your request."),
)


def _azure_authenticate(request: Request, expected: str | None) -> None:
    """Azure's key comes as `api-key`; every call names its `api-version` (without one, the route is not found)."""
    if not request.query_params.get("api-version"):
        raise ApiError(404, "404", "Resource not found")
    key = request.headers.get("api-key", "")
    if not key or (expected is not None and key != expected):
        raise ApiError(
            401,
            "401",
            "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key "
            "for an active subscription and use a correct regional API endpoint for your resource.",
        )


def _azure_error_body(error: ApiError, request_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    """`{"error": {code, message}}`; errors of the model's own API keep OpenAI's `type` and `param` too."""
    body: dict[str, Any] = {"code": error.code or error.kind, "message": error.message}
    if error.kind.endswith("_error"):
        body.update(type=error.kind, param=error.param)
    return {"error": body}, {"apim-request-id": request_id}


AZURE_DIALECT = Dialect(
    name=AZURE.name,
    prefix="/azure/",
    not_found="404",
    error_body=_azure_error_body,
    authenticate=_azure_authenticate,
    server_error=DIALECT.server_error,
    overloaded=DIALECT.overloaded,
    rate_limited=lambda model, wait: ApiError(
        429,
        "requests",
        "Requests to the ChatCompletions_Create Operation under Azure OpenAI API have exceeded the rate limit of "
        f"your current tier. Please retry after {max(1, round(wait))} seconds.",
        code="429",
        headers=retry_headers(wait),
    ),
    bad_json=DIALECT.bad_json,
)
# Flex "may return 429 Resource Unavailable errors" when it lacks capacity; such a request is not charged
# (developers.openai.com/api/docs/guides/flex-processing). The docs give the status and the words, not the body: it
# carries no rate-limit headers and no retry-after, since it says nothing about the caller's limits.
FLEX_UNAVAILABLE = ApiError(
    429,
    "resource_unavailable",
    "Resource Unavailable: flex capacity is exhausted. Please retry later.",
    code="resource_unavailable",
)
DIALECTS = (DIALECT, AZURE_DIALECT, replace(DIALECT, name=GROQ.name, prefix="/groq/", authenticate=_groq_authenticate))


def routes(api: Api) -> list[Route]:
    """Every flavour's routes under its prefix, in its dialect; and Groq's list of models (OpenAI's and Azure's are
    `app.models_route`'s and none)."""
    return [
        api.route(GROQ.name, "GET", GROQ.prefix + "/models", partial(groq_models, api)),
        *(
            api.route(flavour.name, method, flavour.prefix + path, partial(handler, api, flavour), live)
            for flavour in FLAVOURS.values()
            for method, path, handler, live in (
                ("POST", "/files", upload, False),
                ("GET", "/files/{file_id}", get_file, False),
                ("GET", "/files/{file_id}/content", file_content, False),
                ("DELETE", "/files/{file_id}", delete_file, False),
                ("POST", "/batches", create_batch, False),
                ("GET", "/batches/{batch_id}", get_batch, False),
                ("POST", "/batches/{batch_id}/cancel", cancel_batch, False),
                ("GET", "/batches", list_batches, False),
                ("POST", flavour.chat_path, chat, True),
                ("POST", "/responses", responses, True),
            )
        ),
    ]


async def groq_models(api: Api, request: Request) -> Response:
    """Groq's `GET /openai/v1/models`: OpenAI's list, each model with Groq's own fields (console.groq.com/docs/api-
    reference#models-list)."""
    now = int(api.emu.clock.now())
    data = [
        {
            "id": name,
            "object": "model",
            "created": now,
            "owned_by": "Groq",
            "active": True,
            "context_window": 131072,
            "public_apps": None,
            "max_completion_tokens": 32768,
        }
        for name in listed(GROQ.name, api.config.models)
    ]
    return JSONResponse({"object": "list", "data": data})


async def upload(api: Api, flavour: Flavour, request: Request) -> Response:
    emu = api.emu
    form = await request.form()
    part = form.get("file")
    purpose = form.get("purpose")
    if part is None or isinstance(part, str):
        raise ApiError(400, "invalid_request_error", "Missing required parameter: 'file'.", "file")
    if purpose != "batch":
        raise ApiError(
            400, "invalid_request_error", f"Invalid purpose {purpose!r}; this emulator accepts 'batch'.", "purpose"
        )
    scratch = emu.store.scratch_path()
    with open(scratch, "wb") as fh:  # starlette spooled the upload to disk; copied on, never read whole
        shutil.copyfileobj(part.file, fh, 1 << 20)
    stored = emu.store.adopt(scratch, part.filename or "upload.jsonl", "batch", int(emu.clock.now()))
    return JSONResponse(stored.as_openai())


def openai_file(api: Api, file_id: str) -> StoredFile:
    stored = api.emu.store.files.get(file_id)
    if stored is None or stored.purpose == "batch_results":
        raise ApiError(404, "invalid_request_error", f"No such File object: {file_id}", "id")
    return stored


async def get_file(api: Api, flavour: Flavour, request: Request) -> Response:
    return JSONResponse(openai_file(api, request.path_params["file_id"]).as_openai())


async def file_content(api: Api, flavour: Flavour, request: Request) -> Response:
    emu = api.emu
    stored = openai_file(api, request.path_params["file_id"])
    if emu.roll(api.config.faults.truncate_rate):
        return Dropped(emu.store.read_file(stored.id), "application/octet-stream")
    return FileResponse(emu.store.path(stored.id), media_type="application/octet-stream")


async def delete_file(api: Api, flavour: Flavour, request: Request) -> Response:
    stored = openai_file(api, request.path_params["file_id"])
    api.emu.store.delete_file(stored.id)
    return JSONResponse({"id": stored.id, "object": "file", "deleted": True})


async def create_batch(api: Api, flavour: Flavour, request: Request) -> Response:
    emu, config = api.emu, api.config
    body = await api.json_body(request, flavour.name)
    for key in ("input_file_id", "endpoint", "completion_window"):
        if not isinstance(body.get(key), str):
            raise ApiError(400, "invalid_request_error", f"Missing required parameter: '{key}'.", key)
    if flavour.endpoint_of(body["endpoint"]) is None:
        raise ApiError(
            400,
            "invalid_request_error",
            f"Invalid endpoint {body['endpoint']!r}; supported: {', '.join(flavour.endpoints)}.",
            "endpoint",
        )
    if not flavour.window_ok(body["completion_window"]):
        raise ApiError(
            400,
            "invalid_request_error",
            f"Invalid completion_window {body['completion_window']!r}.",
            "completion_window",
        )
    metadata = body.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, dict)
        or len(metadata) > 16
        or any(not isinstance(v, str) or len(k) > 64 or len(v) > 512 for k, v in metadata.items())
    ):
        raise ApiError(
            400,
            "invalid_request_error",
            "metadata: at most 16 pairs, keys up to 64 and values up to 512 characters.",
            "metadata",
        )
    stored = emu.store.files.get(body["input_file_id"])
    if stored is None:
        raise ApiError(404, "invalid_request_error", f"No such File object: {body['input_file_id']}", "input_file_id")
    if stored.purpose != "batch":
        raise ApiError(400, "invalid_request_error", "The input file must have purpose 'batch'.", "input_file_id")
    batch = openai_batches.create(
        emu.store,
        config,
        emu.rng,
        flavour,
        stored.id,
        body["endpoint"],
        body["completion_window"],
        metadata,
        emu.clock.now(),
    )
    return JSONResponse(openai_batches.status(emu.store, batch, config, emu.clock.now(), emu.responder))


def openai_batch(api: Api, flavour: Flavour, batch_id: str) -> dict[str, Any]:
    batch = api.emu.store.openai_batches.get(batch_id)
    if batch is None or batch.get("flavour", "openai") != flavour.name:
        raise ApiError(404, "invalid_request_error", f"No batch found with id '{batch_id}'.", "batch_id")
    return batch


def batch_status(api: Api, batch: dict[str, Any]) -> dict[str, Any]:
    emu = api.emu
    return openai_batches.status(emu.store, batch, api.config, emu.clock.now(), emu.responder)


async def get_batch(api: Api, flavour: Flavour, request: Request) -> Response:
    return JSONResponse(batch_status(api, openai_batch(api, flavour, request.path_params["batch_id"])))


async def cancel_batch(api: Api, flavour: Flavour, request: Request) -> Response:
    batch = openai_batch(api, flavour, request.path_params["batch_id"])
    openai_batches.cancel(api.emu.store, batch, api.config, api.emu.clock.now())
    return JSONResponse(batch_status(api, batch))


async def list_batches(api: Api, flavour: Flavour, request: Request) -> Response:
    emu = api.emu
    limit = limit_param(request.query_params.get("limit"), 20)
    mine = {i: b for i, b in emu.store.openai_batches.items() if b.get("flavour", "openai") == flavour.name}
    ids = sorted(mine, key=lambda i: mine[i]["created"], reverse=True)
    after = request.query_params.get("after")
    if after:
        ids = ids[ids.index(after) + 1 :] if after in ids else []
    page = ids[:limit]
    now = emu.clock.now()
    data = [openai_batches.status(emu.store, emu.store.openai_batches[i], api.config, now, emu.responder) for i in page]
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "first_id": page[0] if page else None,
            "last_id": page[-1] if page else None,
            "has_more": len(ids) > limit,
        }
    )


async def chat(api: Api, flavour: Flavour, request: Request) -> Response:
    emu, config = api.emu, api.config
    body = await api.json_body(request, flavour.name)
    if flavour.deployment_paths:  # Azure: the deployment is in the path, whatever the body says
        body = {**body, "model": request.path_params["deployment"]} if isinstance(body, dict) else body
    if not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list) or not body["messages"]:
        raise ApiError(400, "invalid_request_error", "Missing required parameter: 'messages'.", "messages")
    if body.get("stream"):
        raise ApiError(400, "invalid_request_error", "This emulator does not stream.", "stream")
    check_model_and_params(api, flavour, body, CHAT)
    limit = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    prompt = sum(count_tokens(json.dumps(m.get("content"))) for m in body["messages"])
    headers = api.live_limit(flavour.name, body, prompt, int(limit))
    await asyncio.sleep(config.timing.live_latency_seconds)
    share, now = config.responder.reasoning_share, int(emu.clock.now())
    completion = openai_completion(body, emu.responder, "live:" + secrets.token_hex(8), now, share)
    openai_cached(emu.store.caches, body, completion, emu.clock.now())
    emu.answered[flavour.name] += 1
    return JSONResponse(completion, headers={**headers, "x-request-id": "req_" + secrets.token_hex(12)})


async def responses(api: Api, flavour: Flavour, request: Request) -> Response:
    emu, config = api.emu, api.config
    body = await api.json_body(request, flavour.name)
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise ApiError(400, "invalid_request_error", "Missing required parameter: 'model'.", "model")
    if not isinstance(body.get("input"), str | list):
        raise ApiError(400, "invalid_request_error", "Missing required parameter: 'input'.", "input")
    if body.get("stream"):
        raise ApiError(400, "invalid_request_error", "This emulator does not stream.", "stream")
    if RESPONSES not in flavour.endpoints.values():
        raise ApiError(404, "invalid_request_error", f"Unknown route POST {flavour.prefix}/responses")
    check_model_and_params(api, flavour, body, RESPONSES)
    prompt = count_tokens(json.dumps([body.get("instructions"), body["input"]]))
    headers = api.live_limit(flavour.name, body, prompt, int(body.get("max_output_tokens") or 0))
    await asyncio.sleep(config.timing.live_latency_seconds)
    share, now = config.responder.reasoning_share, int(emu.clock.now())
    response = openai_response(body, emu.responder, "live:" + secrets.token_hex(8), now, share)
    openai_cached(emu.store.caches, body, response, emu.clock.now())
    emu.answered[flavour.name] += 1
    return JSONResponse(response, headers={**headers, "x-request-id": "req_" + secrets.token_hex(12)})


def check_model_and_params(api: Api, flavour: Flavour, body: dict[str, Any], endpoint: str) -> None:
    """What the service refuses before answering: a model it does not run (404), a parameter its request type
    lacks or the model's family does not take (400, the first one, as the API names one at a time)."""
    config = api.config
    runs = flavour.model_of(body["model"], config)
    if runs is None:
        error = openai_batches.missing_model(flavour, body["model"])["error"]
        raise ApiError(404, error.get("type", error["code"]), error["message"], code=error["code"])
    refused = refusals({**body, "model": runs}, endpoint, flavour.strict(runs, config))
    if refused:
        raise ApiError(400, "invalid_request_error", refused[0].message, refused[0].param, refused[0].code)
    if body.get("service_tier") == "flex" and api.emu.roll(config.faults.flex_unavailable_rate):
        raise FLEX_UNAVAILABLE
