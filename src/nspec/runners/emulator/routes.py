"""What every emulated API's routes share: the error a route raises (`ApiError`), each API's way of speaking
(`Dialect`: its error bodies, keys, fault words and the paths it answers), and `Api`, the wrapper around every route
that authenticates, injects faults and counts statuses, reads JSON bodies, applies live rate limits and answers a
route that does not exist in the words of the API its path belongs to."""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from nspec.runners.emulator.emulation import Emulation
from nspec.runners.emulator.models import served
from nspec.runners.emulator.ratelimit import Limiter

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
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.param, self.code = status, kind, message, param, code
        self.headers = headers or {}
        self.details = details  # Google's error details (RetryInfo, ...)


@dataclass(frozen=True)
class Dialect:
    """How one emulated API speaks where every route is alike: its name (the provider's), the paths it answers, its
    error bodies, how it checks a key, and the words of its server errors, overloads, rate limits and unknown routes.
    Each API's module defines its own (`DIALECTS`)."""

    name: str
    # Where its paths start: a path that is no route is answered by the API with the longest prefix it starts with
    # (OpenAI's is empty: every path no other API claims).
    prefix: str
    not_found: str  # the error kind of its 404
    error_body: Callable[[ApiError, str], tuple[dict[str, Any], dict[str, str]]]  # (error, request id) → body, headers
    authenticate: Callable[[Request, str | None], None]  # raises ApiError
    server_error: ApiError
    overloaded: ApiError
    rate_limited: Callable[[str, float], ApiError]  # (model, seconds to wait) → the 429 with its retry signal
    bad_json: ApiError


def error_response(dialect: Dialect, error: ApiError) -> Response:
    body, headers = dialect.error_body(error, "req_" + secrets.token_hex(12))
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
    JSON bodies, live rate limits (a limiter per API), the model catalog, and the answer to an unknown route."""

    def __init__(self, emu: Emulation, dialects: Iterable[Dialect]) -> None:
        self.emu = emu
        self.config = emu.config
        self.dialects = {dialect.name: dialect for dialect in dialects}
        now = emu.clock.now()
        self.limiters = {name: Limiter(self.config.rate_limits, now) for name in self.dialects}

    def route(self, provider: str, method: str, path: str, handler: Handler, live: bool = False) -> Route:
        """``handler`` at ``method path``, in the dialect of ``provider``; a ``live`` route (a model's answer) also
        fails, is overloaded and drops its connection at the configured rates."""
        emu, config, dialect = self.emu, self.config, self.dialects[provider]

        async def endpoint(request: Request) -> Response:
            emu.seen.append((request.method, request.url.path, dict(request.query_params), dict(request.headers)))
            emu.handling += 1
            try:
                dialect.authenticate(request, config.api_key)
                if live:
                    if emu.roll(config.faults.server_error_rate):
                        raise dialect.server_error
                    if emu.roll(config.faults.overloaded_rate):
                        raise dialect.overloaded
                response = await handler(request)
                if live and emu.roll(config.faults.drop_rate):
                    return Dropped(bytes(response.body), "application/json")
            except ApiError as error:
                response = error_response(dialect, error)
            finally:
                emu.handling -= 1
            emu.statuses[response.status_code] += 1
            return response

        return Route(path, endpoint, methods=[method])

    async def json_body(self, request: Request, provider: str = "openai") -> Any:
        try:
            return json.loads(await request.body())
        except json.JSONDecodeError:
            raise self.dialects[provider].bad_json from None

    def serves(self, provider: str, model: str) -> bool:
        return served(provider, model, self.config.models)

    def live_limit(self, provider: str, body: dict[str, Any], prompt_tokens: int, max_tokens: int) -> dict[str, str]:
        """The rate-limit headers of a live call, or its 429."""
        emu = self.emu
        decision = self.limiters[provider].take(prompt_tokens + max_tokens, emu.clock.now(), provider)
        if not decision.allowed:
            wait = max(decision.retry_after, 0.001)
            refused = self.dialects[provider].rate_limited(str(body.get("model")), wait)
            refused.headers.update(decision.headers)
            raise refused
        return decision.headers

    async def unknown_route(self, request: Request, exc: Exception) -> Response:
        """A 404 (or 405) for a path no route answers, in the words of the API the path belongs to."""
        path = request.url.path
        dialect = max((d for d in self.dialects.values() if path.startswith(d.prefix)), key=lambda d: len(d.prefix))
        return error_response(dialect, ApiError(404, dialect.not_found, f"Unknown route {request.method} {path}"))


def retry_headers(wait: float) -> dict[str, str]:
    """`retry-after` (whole seconds) and `retry-after-ms`, as OpenAI and Anthropic send them with a 429."""
    return {"retry-after": str(max(1, round(wait))), "retry-after-ms": str(max(1, round(wait * 1000)))}


def limit_param(value: str | None, default: int) -> int:
    try:
        return max(1, min(1000, int(value))) if value is not None else default
    except ValueError:
        return default
