"""The emulator's HTTP API: the services in OpenAI's format (`openai_api`: OpenAI at `http://HOST:PORT/v1`, Azure
OpenAI at `http://HOST:PORT/azure`, Groq at `http://HOST:PORT/groq/openai/v1`), Anthropic's (`http://HOST:PORT`,
`anthropic_api`), Gemini's (`http://HOST:PORT/google`, `google_api`), Mistral's (`http://HOST:PORT/mistral`,
`mistral_api`) and Together's (`http://HOST:PORT/together`, `together_api`), each a router of its own with its
dialect (error shapes, keys, fault words), sharing here the route wrapper that authenticates, injects faults and
counts, live rate limits, and the model catalog."""

from __future__ import annotations

import json
import random
import secrets
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.param, self.code = status, kind, message, param, code
        self.headers = headers or {}
        self.details = details  # Google's error details (RetryInfo, ...)


@dataclass(frozen=True)
class Dialect:
    """How one emulated API speaks where every route is alike: its error bodies, how it checks a key, and the words
    of its server errors, overloads and rate limits. Each API's module defines its own (`DIALECT`)."""

    error_body: Callable[[ApiError, str], tuple[dict[str, Any], dict[str, str]]]  # (error, request id) → body, headers
    authenticate: Callable[[Request, str | None], None]  # raises ApiError
    server_error: ApiError
    overloaded: ApiError
    rate_limited: Callable[[str, float], ApiError]  # (model, seconds to wait) → the 429 with its retry signal
    bad_json: ApiError


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
        # The latest requests' method, path, query and headers (for tests of what a client sends).
        self.seen: deque[tuple[str, str, dict[str, str], dict[str, str]]] = deque(maxlen=200)
        now = self.clock.now()
        self.limiters = {
            name: Limiter(config.rate_limits, now)
            for name in ("openai", "azure", "groq", "anthropic", "google", "mistral", "together")
        }

    def roll(self, rate: float) -> bool:
        return rate > 0 and self.rng.random() < rate


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
    JSON bodies, live rate limits, and the model catalog."""

    def __init__(self, emu: Emulation, dialects: dict[str, Dialect]) -> None:
        self.emu = emu
        self.config = emu.config
        self.dialects = dialects

    def route(self, provider: str, method: str, path: str, live: bool = False) -> Callable[[Handler], Route]:
        emu, config, dialect = self.emu, self.config, self.dialects[provider]

        def wrap(handler: Handler) -> Route:
            async def endpoint(request: Request) -> Response:
                emu.seen.append((request.method, request.url.path, dict(request.query_params), dict(request.headers)))
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
                emu.statuses[response.status_code] += 1
                return response

            return Route(path, endpoint, methods=[method])

        return wrap

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
        decision = emu.limiters[provider].take(prompt_tokens + max_tokens, emu.clock.now(), provider)
        if not decision.allowed:
            wait = max(decision.retry_after, 0.001)
            refused = self.dialects[provider].rate_limited(str(body.get("model")), wait)
            refused.headers.update(decision.headers)
            raise refused
        return decision.headers


def build_app(emu: Emulation) -> Starlette:
    """The emulator's app: each API's routes from its own router, in its own dialect."""
    from nspec.runners.emulator import anthropic_api, google_api, mistral_api, openai_api, together_api
    from nspec.runners.emulator.flavours import FLAVOURS

    modules = {"anthropic": anthropic_api, "google": google_api, "mistral": mistral_api, "together": together_api}
    api = Api(emu, {**openai_api.DIALECTS, **{name: module.DIALECT for name, module in modules.items()}})

    async def not_found(request: Request, exc: Exception) -> Response:
        path = request.url.path
        prefixes = {
            "/v1/messages": "anthropic",
            "/google/": "google",
            "/mistral/": "mistral",
            "/azure/": "azure",
            "/groq/": "groq",
            "/together/": "together",
        }
        name = next((api for prefix, api in prefixes.items() if path.startswith(prefix)), "openai")
        kind = {"anthropic": "not_found_error", "google": "NOT_FOUND", "mistral": "not_found", "azure": "404"}.get(
            name, "invalid_request_error"
        )
        return error_response(api.dialects[name], ApiError(404, kind, f"Unknown route {request.method} {path}"))

    routes = [route for flavour in FLAVOURS.values() for route in openai_api.router(api, flavour).routes]
    routes += [route for module in modules.values() for route in module.router(api).routes]
    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})


def retry_headers(wait: float) -> dict[str, str]:
    """`retry-after` (whole seconds) and `retry-after-ms`, as OpenAI and Anthropic send them with a 429."""
    return {"retry-after": str(max(1, round(wait))), "retry-after-ms": str(max(1, round(wait * 1000)))}


def limit_param(value: str | None, default: int) -> int:
    try:
        return max(1, min(1000, int(value))) if value is not None else default
    except ValueError:
        return default
