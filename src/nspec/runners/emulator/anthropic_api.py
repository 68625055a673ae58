"""Anthropic's routes (base URL `http://HOST:PORT`): messages, token counts and message batches
(`anthropic_batches`). Each call names its API version (`anthropic-version`); what that version and the model refuse
is `runners.providers.anthropic_models`, the rules `nspec validate` applies."""

from __future__ import annotations

import asyncio
import secrets
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from nspec.runners.emulator import anthropic_batches
from nspec.runners.emulator.caching import breakpoint_problem
from nspec.runners.emulator.generation import anthropic_message, anthropic_prompt_tokens
from nspec.runners.emulator.models import anthropic_refusal
from nspec.runners.emulator.routes import Api, ApiError, Dialect, Dropped, limit_param, retry_headers
from nspec.runners.providers.anthropic_models import VERSIONS, refusals


def _authenticate(request: Request, expected: str | None) -> None:
    auth = request.headers.get("authorization", "")
    bearer = auth[7:] if auth.lower().startswith("bearer ") else ""
    key = request.headers.get("x-api-key", "") or bearer  # the SDKs send either
    if not key or (expected is not None and key != expected):
        raise ApiError(401, "authentication_error", "invalid x-api-key")
    version = request.headers.get("anthropic-version")
    if not version:
        raise ApiError(400, "invalid_request_error", "anthropic-version: header is required")
    if version not in VERSIONS:
        raise ApiError(400, "invalid_request_error", f"anthropic-version: invalid version {version!r}")


def _error_body(error: ApiError, request_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    body = {"type": "error", "error": {"type": error.kind, "message": error.message}, "request_id": request_id}
    return body, {"request-id": request_id}


DIALECT = Dialect(
    name="anthropic",
    prefix="/v1/messages",
    not_found="not_found_error",
    error_body=_error_body,
    authenticate=_authenticate,
    server_error=ApiError(500, "api_error", "The server had an error while processing your request."),
    overloaded=ApiError(529, "overloaded_error", "Overloaded"),
    rate_limited=lambda model, wait: ApiError(
        429, "rate_limit_error", "This request would exceed the rate limit.", headers=retry_headers(wait)
    ),
    bad_json=ApiError(400, "invalid_request_error", "We could not parse the JSON body of your request."),
)
DIALECTS = (DIALECT,)


def routes(api: Api) -> list[Route]:
    return [
        api.route("anthropic", method, path, partial(handler, api), live)
        for method, path, handler, live in (
            ("POST", "/v1/messages", messages, True),
            ("POST", "/v1/messages/count_tokens", count, False),
            ("POST", "/v1/messages/batches", create_message_batch, False),
            ("GET", "/v1/messages/batches/{batch_id}", get_message_batch, False),
            ("POST", "/v1/messages/batches/{batch_id}/cancel", cancel_message_batch, False),
            ("DELETE", "/v1/messages/batches/{batch_id}", delete_message_batch, False),
            ("GET", "/v1/messages/batches/{batch_id}/results", message_batch_results, False),
            ("GET", "/v1/messages/batches", list_message_batches, False),
        )
    ]


def check_message_params(body: Any) -> None:
    for name in ("model", "max_tokens", "messages"):
        if not isinstance(body, dict) or name not in body:
            raise ApiError(400, "invalid_request_error", f"{name}: Field required")
    if not isinstance(body["messages"], list) or not body["messages"]:
        raise ApiError(400, "invalid_request_error", "messages: at least one message is required")
    problem = breakpoint_problem(body)
    if problem:
        raise ApiError(400, "invalid_request_error", problem)


async def messages(api: Api, request: Request) -> Response:
    emu, config = api.emu, api.config
    body = await api.json_body(request, "anthropic")
    check_message_params(body)
    refused = refusals(body, request.headers["anthropic-version"])
    if refused:  # what the API version and the model refuse (the first, as the API names one)
        raise ApiError(400, "invalid_request_error", refused[0].message)
    if body.get("stream"):
        raise ApiError(400, "invalid_request_error", "This emulator does not stream.")
    if not api.serves("anthropic", body["model"]):
        refusal = anthropic_refusal(body["model"])
        raise ApiError(404, refusal["type"], refusal["message"])
    headers = api.live_limit("anthropic", body, anthropic_prompt_tokens(body), int(body["max_tokens"]))
    await asyncio.sleep(config.timing.live_latency_seconds)
    share = config.responder.reasoning_share
    message = anthropic_message(body, emu.responder, "live:" + secrets.token_hex(8), share)
    message["usage"].update(emu.store.caches.anthropic(body, message["usage"]["input_tokens"], emu.clock.now()))
    emu.answered["anthropic"] += 1
    return JSONResponse(message, headers={**headers, "request-id": "req_" + secrets.token_hex(12)})


async def count(api: Api, request: Request) -> Response:
    body = await api.json_body(request, "anthropic")
    if not isinstance(body, dict) or "messages" not in body or "model" not in body:
        raise ApiError(400, "invalid_request_error", "messages: Field required")
    if not isinstance(body["messages"], list) or not body["messages"]:
        raise ApiError(400, "invalid_request_error", "messages: at least one message is required")
    problem = breakpoint_problem(body)
    if problem:
        raise ApiError(400, "invalid_request_error", problem)
    if not api.serves("anthropic", str(body["model"])):
        refusal = anthropic_refusal(str(body["model"]))
        raise ApiError(404, refusal["type"], refusal["message"])
    return JSONResponse({"input_tokens": anthropic_prompt_tokens(body)})


def anthropic_batch(api: Api, batch_id: str) -> dict[str, Any]:
    batch = api.emu.store.anthropic_batches.get(batch_id)
    if batch is None:
        raise ApiError(404, "not_found_error", f"Message batch {batch_id} not found.")
    return batch


def batch_view(api: Api, request: Request, batch: dict[str, Any]) -> dict[str, Any]:
    emu = api.emu
    return anthropic_batches.status(emu.store, batch, api.config, emu.clock.now(), emu.responder, str(request.base_url))


async def create_message_batch(api: Api, request: Request) -> Response:
    emu, config = api.emu, api.config
    body = emu.store.scratch_path()
    with open(body, "wb") as fh:  # to disk as it comes: a batch body may be 256 MB
        async for chunk in request.stream():
            fh.write(chunk)
    if body.stat().st_size > config.limits.anthropic_max_bytes:
        body.unlink()
        # platform.claude.com, "Errors": a request over the endpoint's size (256 MB for Message Batches) is 413.
        raise ApiError(413, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
    try:
        version = request.headers["anthropic-version"]
        batch = anthropic_batches.create(emu.store, config, emu.rng, body, emu.clock.now(), version)
    except anthropic_batches.InvalidRequest as exc:
        raise ApiError(400, "invalid_request_error", str(exc)) from None
    return JSONResponse(batch_view(api, request, batch))


async def get_message_batch(api: Api, request: Request) -> Response:
    return JSONResponse(batch_view(api, request, anthropic_batch(api, request.path_params["batch_id"])))


async def cancel_message_batch(api: Api, request: Request) -> Response:
    batch = anthropic_batch(api, request.path_params["batch_id"])
    anthropic_batches.cancel(api.emu.store, batch, api.emu.clock.now())
    return JSONResponse(batch_view(api, request, batch))


async def delete_message_batch(api: Api, request: Request) -> Response:
    store = api.emu.store
    batch = anthropic_batch(api, request.path_params["batch_id"])
    if batch_view(api, request, batch)["processing_status"] != "ended":
        raise ApiError(
            400, "invalid_request_error", "Batches can only be deleted once they have ended; cancel it first."
        )
    with store.lock:
        del store.anthropic_batches[batch["id"]]
        store.delete_file(batch["final"]["results_file"])
    return JSONResponse({"id": batch["id"], "type": "message_batch_deleted"})


async def message_batch_results(api: Api, request: Request) -> Response:
    emu = api.emu
    batch = anthropic_batch(api, request.path_params["batch_id"])
    if batch_view(api, request, batch)["processing_status"] != "ended":
        raise ApiError(400, "invalid_request_error", "Results are available once the batch has ended.")
    results = batch["final"]["results_file"]
    if emu.roll(api.config.faults.truncate_rate):
        return Dropped(emu.store.read_file(results), "application/binary")
    return FileResponse(emu.store.path(results), media_type="application/binary")


async def list_message_batches(api: Api, request: Request) -> Response:
    batches = api.emu.store.anthropic_batches
    limit = limit_param(request.query_params.get("limit"), 20)
    ids = sorted(batches, key=lambda i: batches[i]["created"], reverse=True)
    after, before = request.query_params.get("after_id"), request.query_params.get("before_id")
    if after:
        ids = ids[ids.index(after) + 1 :] if after in ids else []
        page = ids[:limit]
        more = len(ids) > limit
    elif before:
        ids = ids[: ids.index(before)] if before in ids else []
        page = ids[-limit:]
        more = len(ids) > limit
    else:
        page, more = ids[:limit], len(ids) > limit
    data = [batch_view(api, request, batches[i]) for i in page]
    return JSONResponse(
        {
            "data": data,
            "has_more": more,
            "first_id": page[0] if page else None,
            "last_id": page[-1] if page else None,
        }
    )
