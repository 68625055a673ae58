"""The emulator's HTTP API: OpenAI's routes (base URL `http://HOST:PORT/v1`, `openai_api`) and Anthropic's (base
URL `http://HOST:PORT`, `anthropic_api`), each a router of its own, sharing here the real authentication rules,
error shapes, rate-limit headers, the model catalog and injected faults."""

from __future__ import annotations

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

from nspec.runners.emulator.config import EmulatorConfig
from nspec.runners.emulator.generation import count_tokens
from nspec.runners.emulator.models import served
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
        self.answered: Counter[str] = Counter()  # live answers given, per provider (a call made twice counts twice)
        now = self.clock.now()
        self.limiters = {"openai": Limiter(config.rate_limits, now), "anthropic": Limiter(config.rate_limits, now)}

    def roll(self, rate: float) -> bool:
        return rate > 0 and self.rng.random() < rate


def error_response(provider: str, error: ApiError) -> Response:
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


class Dropped(Response):
    """Declares the full length, sends part of the body, then ends the response: the client sees the connection
    drop mid-body, as when a network or a proxy fails."""

    def __init__(self, content: bytes, media_type: str) -> None:
        super().__init__(content, media_type=media_type)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body[: len(self.body) // 2], "more_body": True})
        raise ConnectionAbortedError("connection dropped (injected fault)")


class Api:
    """What every route shares: authentication, injected faults and status counting around each handler (`route`),
    JSON bodies, live rate limits, and the model catalog."""

    def __init__(self, emu: Emulation) -> None:
        self.emu = emu
        self.config = emu.config

    def route(self, provider: str, method: str, path: str, live: bool = False) -> Callable[[Handler], Route]:
        emu, config = self.emu, self.config

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
                        return Dropped(bytes(response.body), "application/json")
                except ApiError as error:
                    response = error_response(provider, error)
                emu.statuses[response.status_code] += 1
                return response

            return Route(path, endpoint, methods=[method])

        return wrap

    async def json_body(self, request: Request) -> Any:
        try:
            return json.loads(await request.body())
        except json.JSONDecodeError:
            raise ApiError(400, "invalid_request_error", "We could not parse the JSON body of your request.") from None

    def serves(self, provider: str, model: str) -> bool:
        return served(provider, model, self.config.models)

    def live_limit(self, provider: str, body: dict[str, Any], prompt_tokens: int, max_tokens: int) -> dict[str, str]:
        """The rate-limit headers of a live call, or its 429."""
        emu = self.emu
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


def build_app(emu: Emulation) -> Starlette:
    """The emulator's app: OpenAI's routes and Anthropic's, each from its own router."""
    from nspec.runners.emulator import anthropic_api, openai_api

    api = Api(emu)

    async def not_found(request: Request, exc: Exception) -> Response:
        provider = "anthropic" if request.url.path.startswith("/v1/messages") else "openai"
        kind = "not_found_error" if provider == "anthropic" else "invalid_request_error"
        return error_response(provider, ApiError(404, kind, f"Unknown route {request.method} {request.url.path}"))

    routes = [*anthropic_api.router(api).routes, *openai_api.router(api).routes]
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


def limit_param(value: str | None, default: int) -> int:
    try:
        return max(1, min(1000, int(value))) if value is not None else default
    except ValueError:
        return default
