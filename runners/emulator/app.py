"""The emulator's HTTP API: OpenAI routes (base URL `http://HOST:PORT/v1`) and Anthropic routes (base URL
`http://HOST:PORT`), with the real authentication rules, error shapes, rate-limit headers and injected faults."""

from __future__ import annotations

import asyncio
import json
import random
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from nspec.runners.emulator import anthropic_batches, openai_batches
from nspec.runners.emulator.config import EmulatorConfig
from nspec.runners.emulator.generation import anthropic_message, count_tokens, openai_completion
from nspec.runners.emulator.ratelimit import Limiter
from nspec.runners.emulator.responders import make_responder
from nspec.runners.emulator.state import Clock, Store

Handler = Callable[[Request], Awaitable[Response]]


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        kind: str,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.param, self.code = status, kind, message, param, code
        self.headers = headers or {}


class Emulation:
    """Everything the routes share: config, clock, store, responder, limiters and the fault dice."""

    def __init__(self, config: EmulatorConfig, state_dir: str | None = None) -> None:
        self.config = config
        self.clock = Clock()
        self.store = Store.open(state_dir)
        self.responder = make_responder(config.responder, config.seed, count_tokens)
        self.rng = random.Random(config.seed)
        self.statuses: Counter[int] = Counter()  # responses served, by HTTP status (for tests and benchmarks)
        now = self.clock.now()
        self.limiters = {"openai": Limiter(config.rate_limits, now), "anthropic": Limiter(config.rate_limits, now)}

    def roll(self, rate: float) -> bool:
        return rate > 0 and self.rng.random() < rate


def _error_response(provider: str, error: ApiError) -> Response:
    request_id = "req_" + secrets.token_hex(12)
    if provider == "openai":
        body: dict[str, Any] = {
            "error": {"message": error.message, "type": error.kind, "param": error.param, "code": error.code}
        }
        headers = {"x-request-id": request_id}
    else:
        body = {"type": "error", "error": {"type": error.kind, "message": error.message}, "request_id": request_id}
        headers = {"request-id": request_id}
    return JSONResponse(body, status_code=error.status, headers={**headers, **error.headers})


class _Dropped(Response):
    """Declares the full length, sends part of the body, then ends the response: the client sees the connection
    drop mid-body, as when a network or a proxy fails."""

    def __init__(self, content: bytes, media_type: str) -> None:
        super().__init__(content, media_type=media_type)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body[: len(self.body) // 2], "more_body": True})
        raise ConnectionAbortedError("connection dropped (injected fault)")


def build_app(emu: Emulation) -> Starlette:
    config = emu.config

    def route(provider: str, method: str, path: str, live: bool = False) -> Callable[[Handler], Route]:
        def wrap(handler: Handler) -> Route:
            async def endpoint(request: Request) -> Response:
                try:
                    _authenticate(provider, request, config.api_key)
                    if live:
                        if emu.roll(config.faults.server_error_rate):
                            raise ApiError(
                                500,
                                "server_error" if provider == "openai" else "api_error",
                                "The server had an error while processing your request.",
                            )
                        if emu.roll(config.faults.overloaded_rate):
                            if provider == "openai":
                                raise ApiError(503, "server_error", "The engine is currently overloaded.")
                            raise ApiError(529, "overloaded_error", "Overloaded")
                    response = await handler(request)
                    if live and emu.roll(config.faults.drop_rate):
                        return _Dropped(bytes(response.body), "application/json")
                except ApiError as error:
                    response = _error_response(provider, error)
                emu.statuses[response.status_code] += 1
                return response

            return Route(path, endpoint, methods=[method])

        return wrap

    async def json_body(request: Request, provider: str) -> Any:
        try:
            return json.loads(await request.body())
        except json.JSONDecodeError:
            kind = "invalid_request_error"
            raise ApiError(400, kind, "We could not parse the JSON body of your request.") from None

    def live_limit(provider: str, body: dict[str, Any], prompt_tokens: int, max_tokens: int) -> dict[str, str]:
        decision = emu.limiters[provider].take(prompt_tokens + max_tokens, emu.clock.now(), provider)
        if not decision.allowed:
            wait = max(decision.retry_after, 0.001)
            headers = {
                **decision.headers,
                "retry-after": str(max(1, round(wait))),
                "retry-after-ms": str(max(1, round(wait * 1000))),
            }
            if provider == "openai":
                raise ApiError(
                    429,
                    "requests",
                    f"Rate limit reached for {body.get('model')}. Please try again in {wait:.3f}s.",
                    code="rate_limit_exceeded",
                    headers=headers,
                )
            raise ApiError(429, "rate_limit_error", "This request would exceed the rate limit.", headers=headers)
        return decision.headers

    routes: list[Route] = []

    # -- OpenAI ---------------------------------------------------------------------------------------------------

    @route("openai", "POST", "/v1/files")
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

    @route("openai", "GET", "/v1/files/{file_id}")
    async def get_file(request: Request) -> Response:
        return JSONResponse(openai_file(request.path_params["file_id"]).as_openai())

    @route("openai", "GET", "/v1/files/{file_id}/content")
    async def file_content(request: Request) -> Response:
        stored = openai_file(request.path_params["file_id"])
        data = emu.store.read_file(stored.id)
        if emu.roll(config.faults.truncate_rate):
            return _Dropped(data, "application/octet-stream")
        return Response(data, media_type="application/octet-stream")

    @route("openai", "DELETE", "/v1/files/{file_id}")
    async def delete_file(request: Request) -> Response:
        stored = openai_file(request.path_params["file_id"])
        emu.store.delete_file(stored.id)
        return JSONResponse({"id": stored.id, "object": "file", "deleted": True})

    routes += [get_file, file_content, delete_file]

    @route("openai", "POST", "/v1/batches")
    async def create_batch(request: Request) -> Response:
        body = await json_body(request, "openai")
        for name in ("input_file_id", "endpoint", "completion_window"):
            if not isinstance(body.get(name), str):
                raise ApiError(400, "invalid_request_error", f"Missing required parameter: '{name}'.", name)
        if body["endpoint"] not in openai_batches.ENDPOINTS:
            raise ApiError(
                400,
                "invalid_request_error",
                f"Invalid endpoint {body['endpoint']!r}; this emulator supports /v1/chat/completions.",
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

    @route("openai", "GET", "/v1/batches/{batch_id}")
    async def get_batch(request: Request) -> Response:
        batch = openai_batch(request.path_params["batch_id"])
        return JSONResponse(openai_batches.status(emu.store, batch, config, emu.clock.now(), emu.responder))

    @route("openai", "POST", "/v1/batches/{batch_id}/cancel")
    async def cancel_batch(request: Request) -> Response:
        batch = openai_batch(request.path_params["batch_id"])
        openai_batches.cancel(emu.store, batch, config, emu.clock.now())
        return JSONResponse(openai_batches.status(emu.store, batch, config, emu.clock.now(), emu.responder))

    @route("openai", "GET", "/v1/batches")
    async def list_batches(request: Request) -> Response:
        limit = _limit(request.query_params.get("limit"), 20)
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

    @route("openai", "POST", "/v1/chat/completions", live=True)
    async def chat(request: Request) -> Response:
        body = await json_body(request, "openai")
        if not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list) or not body["messages"]:
            raise ApiError(400, "invalid_request_error", "Missing required parameter: 'messages'.", "messages")
        if body.get("stream"):
            raise ApiError(400, "invalid_request_error", "This emulator does not stream.", "stream")
        limit = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        prompt = sum(count_tokens(json.dumps(m.get("content"))) for m in body["messages"])
        headers = live_limit("openai", body, prompt, int(limit))
        await asyncio.sleep(config.timing.live_latency_seconds)
        completion = openai_completion(body, emu.responder, "live:" + secrets.token_hex(8), int(emu.clock.now()))
        return JSONResponse(completion, headers={**headers, "x-request-id": "req_" + secrets.token_hex(12)})

    routes.append(chat)

    # -- Anthropic ------------------------------------------------------------------------------------------------

    def check_message_params(body: Any) -> None:
        for name in ("model", "max_tokens", "messages"):
            if not isinstance(body, dict) or name not in body:
                raise ApiError(400, "invalid_request_error", f"{name}: Field required")
        if not isinstance(body["messages"], list) or not body["messages"]:
            raise ApiError(400, "invalid_request_error", "messages: at least one message is required")

    @route("anthropic", "POST", "/v1/messages", live=True)
    async def messages(request: Request) -> Response:
        body = await json_body(request, "anthropic")
        check_message_params(body)
        if body.get("stream"):
            raise ApiError(400, "invalid_request_error", "This emulator does not stream.")
        prompt = sum(count_tokens(json.dumps(m.get("content"))) for m in body["messages"])
        headers = live_limit("anthropic", body, prompt, int(body["max_tokens"]))
        await asyncio.sleep(config.timing.live_latency_seconds)
        message = anthropic_message(body, emu.responder, "live:" + secrets.token_hex(8))
        return JSONResponse(message, headers={**headers, "request-id": "req_" + secrets.token_hex(12)})

    @route("anthropic", "POST", "/v1/messages/count_tokens")
    async def count(request: Request) -> Response:
        body = await json_body(request, "anthropic")
        if not isinstance(body, dict) or "messages" not in body or "model" not in body:
            raise ApiError(400, "invalid_request_error", "messages: Field required")
        system = body.get("system")
        texts = [system if isinstance(system, str) else json.dumps(system)] if system else []
        texts += [
            m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
            for m in body["messages"]
        ]
        return JSONResponse({"input_tokens": 3 + sum(4 + count_tokens(t) for t in texts)})

    routes += [messages, count]

    def anthropic_batch(batch_id: str) -> dict[str, Any]:
        batch = emu.store.anthropic_batches.get(batch_id)
        if batch is None:
            raise ApiError(404, "not_found_error", f"Message batch {batch_id} not found.")
        return batch

    def batch_view(request: Request, batch: dict[str, Any]) -> dict[str, Any]:
        return anthropic_batches.status(emu.store, batch, config, emu.clock.now(), emu.responder, str(request.base_url))

    @route("anthropic", "POST", "/v1/messages/batches")
    async def create_message_batch(request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            raise ApiError(400, "invalid_request_error", "invalid JSON body") from None
        try:
            batch = anthropic_batches.create(emu.store, config, emu.rng, body, len(raw), emu.clock.now())
        except anthropic_batches.InvalidRequest as exc:
            raise ApiError(400, "invalid_request_error", str(exc)) from None
        return JSONResponse(batch_view(request, batch))

    @route("anthropic", "GET", "/v1/messages/batches/{batch_id}")
    async def get_message_batch(request: Request) -> Response:
        return JSONResponse(batch_view(request, anthropic_batch(request.path_params["batch_id"])))

    @route("anthropic", "POST", "/v1/messages/batches/{batch_id}/cancel")
    async def cancel_message_batch(request: Request) -> Response:
        batch = anthropic_batch(request.path_params["batch_id"])
        anthropic_batches.cancel(emu.store, batch, emu.clock.now())
        return JSONResponse(batch_view(request, batch))

    @route("anthropic", "DELETE", "/v1/messages/batches/{batch_id}")
    async def delete_message_batch(request: Request) -> Response:
        batch = anthropic_batch(request.path_params["batch_id"])
        if batch_view(request, batch)["processing_status"] != "ended":
            raise ApiError(
                400, "invalid_request_error", "Batches can only be deleted once they have ended; cancel it first."
            )
        with emu.store.lock:
            del emu.store.anthropic_batches[batch["id"]]
            emu.store.delete_file(batch["final"]["results_file"])
        return JSONResponse({"id": batch["id"], "type": "message_batch_deleted"})

    @route("anthropic", "GET", "/v1/messages/batches/{batch_id}/results")
    async def message_batch_results(request: Request) -> Response:
        batch = anthropic_batch(request.path_params["batch_id"])
        if batch_view(request, batch)["processing_status"] != "ended":
            raise ApiError(400, "invalid_request_error", "Results are available once the batch has ended.")
        data = emu.store.read_file(batch["final"]["results_file"])
        if emu.roll(config.faults.truncate_rate):
            return _Dropped(data, "application/binary")
        return Response(data, media_type="application/binary")

    @route("anthropic", "GET", "/v1/messages/batches")
    async def list_message_batches(request: Request) -> Response:
        limit = _limit(request.query_params.get("limit"), 20)
        ids = sorted(emu.store.anthropic_batches, key=lambda i: emu.store.anthropic_batches[i]["created"], reverse=True)
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
        data = [batch_view(request, emu.store.anthropic_batches[i]) for i in page]
        return JSONResponse(
            {
                "data": data,
                "has_more": more,
                "first_id": page[0] if page else None,
                "last_id": page[-1] if page else None,
            }
        )

    routes += [
        create_message_batch,
        get_message_batch,
        cancel_message_batch,
        delete_message_batch,
        message_batch_results,
        list_message_batches,
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        provider = "anthropic" if request.url.path.startswith("/v1/messages") else "openai"
        kind = "not_found_error" if provider == "anthropic" else "invalid_request_error"
        return _error_response(provider, ApiError(404, kind, f"Unknown route {request.method} {request.url.path}"))

    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})


def _authenticate(provider: str, request: Request, expected: str | None) -> None:
    auth = request.headers.get("authorization", "")
    bearer = auth[7:] if auth.lower().startswith("bearer ") else ""
    if provider == "openai":
        if not bearer or (expected is not None and bearer != expected):
            raise ApiError(
                401,
                "invalid_request_error",
                "Incorrect API key provided." if bearer else "You didn't provide an API key.",
                code="invalid_api_key",
            )
        return
    key = request.headers.get("x-api-key", "") or bearer  # anthropic SDKs send either
    if not key or (expected is not None and key != expected):
        raise ApiError(401, "authentication_error", "invalid x-api-key")
    if not request.headers.get("anthropic-version"):
        raise ApiError(400, "invalid_request_error", "anthropic-version: header is required")


def _limit(value: str | None, default: int) -> int:
    try:
        return max(1, min(1000, int(value))) if value is not None else default
    except ValueError:
        return default
