"""OpenAI's routes (base URL `http://HOST:PORT/v1`): files, batches (`openai_batches`) and chat completions."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, Router

from nspec.runners.emulator import openai_batches
from nspec.runners.emulator.app import Api, ApiError, Dialect, Dropped, limit_param, retry_headers
from nspec.runners.emulator.generation import count_tokens, openai_completion, openai_response
from nspec.runners.emulator.models import openai_refusal
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


def _error_body(error: ApiError, request_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    body = {"error": {"message": error.message, "type": error.kind, "param": error.param, "code": error.code}}
    return body, {"x-request-id": request_id}


DIALECT = Dialect(
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


def router(api: Api) -> Router:
    emu, config = api.emu, api.config
    routes: list[Route] = []

    @api.route("openai", "POST", "/v1/files")
    async def upload(request: Request) -> Response:
        form = await request.form()
        part = form.get("file")
        purpose = form.get("purpose")
        if part is None or isinstance(part, str):
            raise ApiError(400, "invalid_request_error", "Missing required parameter: 'file'.", "file")
        if purpose != "batch":
            raise ApiError(
                400, "invalid_request_error", f"Invalid purpose {purpose!r}; this emulator accepts 'batch'.", "purpose"
            )
        data = await part.read()
        stored = emu.store.put_file(part.filename or "upload.jsonl", "batch", data, int(emu.clock.now()))
        return JSONResponse(stored.as_openai())

    routes.append(upload)

    def openai_file(file_id: str) -> Any:
        stored = emu.store.files.get(file_id)
        if stored is None or stored.purpose == "batch_results":
            raise ApiError(404, "invalid_request_error", f"No such File object: {file_id}", "id")
        return stored

    @api.route("openai", "GET", "/v1/files/{file_id}")
    async def get_file(request: Request) -> Response:
        return JSONResponse(openai_file(request.path_params["file_id"]).as_openai())

    @api.route("openai", "GET", "/v1/files/{file_id}/content")
    async def file_content(request: Request) -> Response:
        stored = openai_file(request.path_params["file_id"])
        data = emu.store.read_file(stored.id)
        if emu.roll(config.faults.truncate_rate):
            return Dropped(data, "application/octet-stream")
        return Response(data, media_type="application/octet-stream")

    @api.route("openai", "DELETE", "/v1/files/{file_id}")
    async def delete_file(request: Request) -> Response:
        stored = openai_file(request.path_params["file_id"])
        emu.store.delete_file(stored.id)
        return JSONResponse({"id": stored.id, "object": "file", "deleted": True})

    routes += [get_file, file_content, delete_file]

    @api.route("openai", "POST", "/v1/batches")
    async def create_batch(request: Request) -> Response:
        body = await api.json_body(request)
        for name in ("input_file_id", "endpoint", "completion_window"):
            if not isinstance(body.get(name), str):
                raise ApiError(400, "invalid_request_error", f"Missing required parameter: '{name}'.", name)
        if body["endpoint"] not in openai_batches.ENDPOINTS:
            raise ApiError(
                400,
                "invalid_request_error",
                f"Invalid endpoint {body['endpoint']!r}; supported: {', '.join(openai_batches.ENDPOINTS)}.",
                "endpoint",
            )
        if body["completion_window"] != "24h":
            raise ApiError(400, "invalid_request_error", "completion_window must be '24h'.", "completion_window")
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
            raise ApiError(
                404, "invalid_request_error", f"No such File object: {body['input_file_id']}", "input_file_id"
            )
        if stored.purpose != "batch":
            raise ApiError(400, "invalid_request_error", "The input file must have purpose 'batch'.", "input_file_id")
        batch = openai_batches.create(
            emu.store,
            config,
            emu.rng,
            stored.id,
            body["endpoint"],
            body["completion_window"],
            metadata,
            emu.clock.now(),
        )
        return JSONResponse(openai_batches.status(emu.store, batch, config, emu.clock.now(), emu.responder))

    def openai_batch(batch_id: str) -> dict[str, Any]:
        batch = emu.store.openai_batches.get(batch_id)
        if batch is None:
            raise ApiError(404, "invalid_request_error", f"No batch found with id '{batch_id}'.", "batch_id")
        return batch

    @api.route("openai", "GET", "/v1/batches/{batch_id}")
    async def get_batch(request: Request) -> Response:
        batch = openai_batch(request.path_params["batch_id"])
        return JSONResponse(openai_batches.status(emu.store, batch, config, emu.clock.now(), emu.responder))

    @api.route("openai", "POST", "/v1/batches/{batch_id}/cancel")
    async def cancel_batch(request: Request) -> Response:
        batch = openai_batch(request.path_params["batch_id"])
        openai_batches.cancel(emu.store, batch, config, emu.clock.now())
        return JSONResponse(openai_batches.status(emu.store, batch, config, emu.clock.now(), emu.responder))

    @api.route("openai", "GET", "/v1/batches")
    async def list_batches(request: Request) -> Response:
        limit = limit_param(request.query_params.get("limit"), 20)
        ids = sorted(emu.store.openai_batches, key=lambda i: emu.store.openai_batches[i]["created"], reverse=True)
        after = request.query_params.get("after")
        if after:
            ids = ids[ids.index(after) + 1 :] if after in ids else []
        page = ids[:limit]
        now = emu.clock.now()
        data = [openai_batches.status(emu.store, emu.store.openai_batches[i], config, now, emu.responder) for i in page]
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "first_id": page[0] if page else None,
                "last_id": page[-1] if page else None,
                "has_more": len(ids) > limit,
            }
        )

    routes += [create_batch, get_batch, cancel_batch, list_batches]

    @api.route("openai", "POST", "/v1/chat/completions", live=True)
    async def chat(request: Request) -> Response:
        body = await api.json_body(request)
        if not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list) or not body["messages"]:
            raise ApiError(400, "invalid_request_error", "Missing required parameter: 'messages'.", "messages")
        if body.get("stream"):
            raise ApiError(400, "invalid_request_error", "This emulator does not stream.", "stream")
        check_model_and_params(body, CHAT)
        limit = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        prompt = sum(count_tokens(json.dumps(m.get("content"))) for m in body["messages"])
        headers = api.live_limit("openai", body, prompt, int(limit))
        await asyncio.sleep(config.timing.live_latency_seconds)
        completion = openai_completion(body, emu.responder, "live:" + secrets.token_hex(8), int(emu.clock.now()))
        emu.answered["openai"] += 1
        return JSONResponse(completion, headers={**headers, "x-request-id": "req_" + secrets.token_hex(12)})

    @api.route("openai", "POST", "/v1/responses", live=True)
    async def responses(request: Request) -> Response:
        body = await api.json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            raise ApiError(400, "invalid_request_error", "Missing required parameter: 'model'.", "model")
        if not isinstance(body.get("input"), str | list):
            raise ApiError(400, "invalid_request_error", "Missing required parameter: 'input'.", "input")
        if body.get("stream"):
            raise ApiError(400, "invalid_request_error", "This emulator does not stream.", "stream")
        check_model_and_params(body, RESPONSES)
        prompt = count_tokens(json.dumps([body.get("instructions"), body["input"]]))
        headers = api.live_limit("openai", body, prompt, int(body.get("max_output_tokens") or 0))
        await asyncio.sleep(config.timing.live_latency_seconds)
        response = openai_response(body, emu.responder, "live:" + secrets.token_hex(8), int(emu.clock.now()))
        emu.answered["openai"] += 1
        return JSONResponse(response, headers={**headers, "x-request-id": "req_" + secrets.token_hex(12)})

    def check_model_and_params(body: dict[str, Any], endpoint: str) -> None:
        """What OpenAI refuses before answering: a model it does not have (404), a parameter the model's family
        does not take (400, the first one, as the API names one at a time)."""
        if not api.serves("openai", body["model"]):
            error = openai_refusal(body["model"])["error"]
            raise ApiError(404, error["type"], error["message"], code=error["code"])
        refused = refusals(body, endpoint)
        if refused:
            raise ApiError(400, "invalid_request_error", refused[0].message, refused[0].param, refused[0].code)

    routes += [chat, responses]

    return Router(routes=routes)
