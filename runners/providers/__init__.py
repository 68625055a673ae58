"""The built-in providers, one module each (`openai`: OpenAI and OpenAI-compatible servers; `anthropic`; `local`: the
local engine), registered through the `nspec.providers` entry points like any plugin, and what they share: a base
with the interface's defaults, the import of an SDK with the pip command when it is missing, the mapping of an HTTP
status to nspec's error tree, and downloads that are parsed only once they arrived whole."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import json
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from nspec import jsonl
from nspec.compiler.caching import CacheCut, CacheStyle
from nspec.compiler.tokenizers import Tokenizer, tokenizer_from_setting
from nspec.errors import (
    AuthenticationFailed,
    BadRequest,
    ConnectionFailed,
    ModelNotFound,
    NspecError,
    PermissionDenied,
    RateLimited,
    ServerError,
    UserError,
)
from nspec.providers import (
    SDK_RETRIES_ENV,
    Credentials,
    Outcome,
    RateHeaders,
    Reasoning,
    TokenCounter,
    message_text,
)

# Headers a model entry may not set: they carry the API key, frame the request, or name the API version whose rules
# `validate` applies (anthropic-version).
RESERVED_HEADERS = frozenset(
    (
        "authorization",
        "api-key",
        "x-api-key",
        "x-goog-api-key",
        "content-type",
        "content-length",
        "host",
        "anthropic-version",
    )
)


class BaseProvider:
    """The interface's defaults: batch where `has_batch`, proxy token counts, no structured output, no rate-limit
    headers. Subclasses set `name`, `request_format`, `key_variables`, and write the hooks that differ."""

    name = ""
    request_format = ""
    key_variables: tuple[str, ...] = ()
    package: str | None = None
    own_tokenizer = False
    default_concurrency = 8  # live calls at once, unless the model's rate_limits say
    optional_batch = False  # whether its models have a batch API only when their entry's `batch_api` says so
    takes_batch_api = False  # whether a model entry may say `batch_api` (its server's batch API, and how it differs)
    endpoints: tuple[str, ...] = ()  # the values a model entry's `endpoint` may take
    priced = True  # whether the shipped price table lists its models (a self-hosted server's cannot be)
    counts_tokens = False  # whether it has a count-tokens endpoint (`count_request`, `token_counter`)
    takes_headers = True  # whether a model entry's `headers` reach its API (its SDK sends extra headers)
    takes_query = True  # likewise `query`
    own_fields: tuple[str, ...] = ()  # entry fields only this provider takes (`api_version`, `base_model`)

    official_hosts: tuple[str, ...] = ()
    base_url_variable: str | None = None  # the environment variable the SDK reads its base URL from
    official_base_url: str | None = None

    def entry_key_variables(self, entry: Mapping[str, Any]) -> tuple[str, ...]:
        return self.key_variables

    def connection(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def default_base_url(self) -> str | None:
        if self.base_url_variable and os.environ.get(self.base_url_variable):
            return os.environ[self.base_url_variable]
        return self.official_base_url

    @property
    def install_hint(self) -> str:
        return f"pip install {self.package}"

    @property
    def lanes(self) -> tuple[str, ...]:
        batch = ("batch",) if self.has_batch({}) else ("batch (with batch_api: true)",) if self.optional_batch else ()
        return (*batch, "live")

    @property
    def token_counts(self) -> str:
        counter = self.tokenizer("", None)
        if counter.exact:
            return f"exact ({counter.name})"
        calibrated = "; exact after nspec calibrate" if self.counts_tokens else ""
        return f"estimated ({counter.name}, margin {counter.margin:.0%}){calibrated}"

    def count_request(self, line: Mapping[str, Any]) -> dict[str, Any] | None:
        return None  # no count-tokens endpoint

    def token_counter(self, creds: Credentials) -> TokenCounter:
        raise UserError(f"{self.name} has no count-tokens endpoint")

    def model_issues(self, entry: Mapping[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        if "batch_api" in entry and not self.takes_batch_api:
            issues.append((("batch_api",), f"`batch_api` does not apply to {self.name} models"))
        if entry.get("mode") == "flex" and not self.takes_flex(entry):
            issues.append((("mode",), f"{entry['id']} has no flex tier (OpenAI's gpt-5 family, o3 and o4-mini do)"))
        if "endpoint" in entry and entry["endpoint"] not in self.endpoints:
            issues.append((("endpoint",), f"`endpoint: {entry['endpoint']}` does not apply to {self.name} models"))
        for key in ("api_version", "base_model"):
            if key in entry and key not in self.own_fields:
                issues.append(((key,), f"`{key}` applies to azure models only"))
        for key, taken in (("headers", self.takes_headers), ("query", self.takes_query)):
            if key in entry and not taken:
                issues.append(((key,), f"{self.name} models do not take extra `{key}` (its SDK sends none)"))
        for header in entry.get("headers") or {}:
            if str(header).lower() in RESERVED_HEADERS:
                issues.append(
                    (
                        ("headers", header),
                        f"`{header}` is nspec's to set (it carries the key, frames the request or names the API "
                        "version)",
                    )
                )
        params = entry.get("params")
        for key, why in self.refused_params(entry).items():
            if isinstance(params, Mapping) and params.get(key) is not None:
                issues.append((("params", key), why))
        return issues

    def refused_params(self, entry: Mapping[str, Any]) -> dict[str, str]:
        return {}  # passed as they are: the API's own rules are not known here

    def reasoning(self, entry: Mapping[str, Any]) -> Reasoning | None:
        return None

    def prefill_problem(self, entry: Mapping[str, Any], prefill: str) -> str | None:
        if self.takes_prefill(entry):
            return None
        return (
            "cannot continue a prefill: its API reads a final assistant message as an earlier turn, not as the start "
            "of its answer; give the prefill only to models that take one (their own `prompt: {prefill: ...}`)"
        )

    def has_batch(self, entry: Mapping[str, Any]) -> bool:
        return True

    def takes_flex(self, entry: Mapping[str, Any]) -> bool:
        return False

    def takes_prefill(self, entry: Mapping[str, Any]) -> bool:
        return False

    def mode(self, entry: Mapping[str, Any]) -> str:
        mode = str(entry.get("mode", "auto"))
        if mode != "auto":
            return mode
        return "batch" if self.has_batch(entry) else "live"

    def tokenizer(self, model: str, setting: str | Mapping[str, Any] | None) -> Tokenizer:
        return tokenizer_from_setting(setting)

    def cache_style(self, entry: Mapping[str, Any]) -> CacheStyle | None:
        return None

    def shape_cache(self, line: dict[str, Any], user: str, cut: CacheCut) -> dict[str, Any]:
        return line

    def request_size(self, line: Mapping[str, Any], count: Callable[[str], int]) -> int:
        return count(json.dumps(line, ensure_ascii=False))  # the whole line: more than the prompt, never less

    def structured_output(self, params: Mapping[str, Any], name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        return dict(params)

    def prompt_text(self, line: Mapping[str, Any]) -> str:
        return "\n\n".join(_strings(line))  # whatever the format, the prompt is among its texts

    def rate_headers(self, headers: Mapping[str, str]) -> RateHeaders:
        return RateHeaders((None, None), (None, None))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def chat_messages(system: str | None, user: str, prefill: str | None, **prefill_fields: Any) -> list[dict[str, Any]]:
    """A chat request's messages in OpenAI's shape: the system prompt, the user message, and the prefill as a final
    assistant message (with whatever fields the API marks a continued message by)."""
    messages: list[dict[str, Any]] = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": user})
    if prefill is not None:
        messages.append({"role": "assistant", "content": prefill, **prefill_fields})
    return messages


def chat_text(messages: Any) -> str:
    """The texts of chat messages (OpenAI's and Anthropic's shape), in order."""
    return "\n\n".join(message_text(m.get("content")) for m in messages or [] if isinstance(m, Mapping))


def sdk(package: str, provider: str, install_hint: str | None = None) -> Any:
    """Import an SDK, or say the command that installs it."""
    try:
        return importlib.import_module(package)
    except ImportError:
        hint = install_hint or f"pip install {package}"
        raise UserError(f"the {package} package is needed for {provider} models: {hint}") from None


def sdk_retries() -> int:
    """How often the SDKs retry control calls themselves (their default, 2, unless tests say 0)."""
    return int(os.environ.get(SDK_RETRIES_ENV, "2"))


def status_error(
    provider: str,
    status: int,
    message: str,
    creds: Credentials,
    model: str,
    headers: Mapping[str, str] | None = None,
    unknown_model: bool = False,
) -> NspecError:
    """An HTTP error status as nspec's error: a refusal names what to fix; the rest are transient. ``unknown_model``
    marks a refusal of the model itself where a provider says so with another status than 404 (Mistral's 400)."""
    detail = f"{provider} answered {status}: {message[:300]}"
    if status == 401:
        where = creds.variable or "the API key"
        return AuthenticationFailed(provider, model, f"{detail} — the key in {where} was refused; set a valid one")
    if status == 403:
        return PermissionDenied(provider, model, f"{detail} — this key may not use {model}", status)
    if status == 404 or unknown_model:
        return ModelNotFound(provider, model, f"{detail} — no model {model!r} here; fix the model id", status)
    if status in (400, 413, 422):
        return BadRequest(provider, model, f"{detail} — for {model}", status)
    if status == 429:
        return RateLimited(provider, detail, retry_after(headers), headers)
    return ServerError(provider, detail, status)


def request_failure(custom_id: str, error: NspecError) -> Outcome | None:
    """A refusal of one request as malformed is that request's result (sending it again cannot help); any other
    error is not a result (None: raise it)."""
    if isinstance(error, BadRequest):
        return Outcome(custom_id, "error", error={"code": str(error.status), "message": str(error)}, retryable=False)
    return None


def connection_error(provider: str, exc: BaseException) -> ConnectionFailed:
    return ConnectionFailed(provider, f"{provider}: no complete response ({type(exc).__name__}: {exc})"[:500])


def sdk_kwargs(method: Callable[..., Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for an SDK method: the body's fields the method declares, the rest (provider-specific
    parameters this SDK version does not know) passed through as `extra_body`, as the batch line would send them."""
    declared = _declared(getattr(method, "__func__", method))
    known = {k: v for k, v in body.items() if k in declared}
    extra = {k: v for k, v in body.items() if k not in declared}
    return {**known, "extra_body": extra} if extra else known


@functools.cache
def _declared(function: Callable[..., Any]) -> frozenset[str]:
    """The parameters an SDK function declares (worked out once: a live run calls it hundreds of times a second)."""
    return frozenset(inspect.signature(function).parameters)


class ChatBodyLines(BaseProvider):
    """A provider whose batch lines are `{custom_id, body}`, the body a chat request with `messages` and
    `max_tokens` (Mistral's and Together's)."""

    def request_size(self, line: Mapping[str, Any], count: Callable[[str], int]) -> int:
        body = line["body"]
        return count(json.dumps(body["messages"], ensure_ascii=False)) + int(body.get("max_tokens") or 0)

    def prompt_text(self, line: Mapping[str, Any]) -> str:
        return chat_text(line["body"]["messages"])


class Clients:
    """The SDK clients of one model's live calls, each carrying at most `PER_CLIENT` calls at once, made as more are
    in flight. An HTTP client's connection pool (httpcore's) walks all its connections on every request and keeps
    100 idle: hundreds of calls through one client cost more CPU than the calls and open new connections over and
    over, and the slower calls then come back the more the runner's Little's law asks for."""

    PER_CLIENT = 64

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make
        self.clients: list[Any] = []
        self.in_flight: list[int] = []

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Any]:
        """A client with room for one more call, for the length of the call."""
        i = next((i for i, n in enumerate(self.in_flight) if n < self.PER_CLIENT), len(self.clients))
        if i == len(self.clients):
            self.clients.append(self.make())
            self.in_flight.append(0)
        self.in_flight[i] += 1
        try:
            yield self.clients[i]
        finally:
            self.in_flight[i] -= 1

    async def close(self) -> None:
        for client in self.clients:
            await client.close()


def answer_json(provider: str, raw: Any) -> dict[str, Any]:
    """The JSON object an SDK's raw response carries, decoded once, as a batch result line carries it (not built
    into the SDK's models and dumped back: a live run reads hundreds a second). A body that is not a JSON object is
    an answer cut off or mangled on the way: a connection error, sent again."""
    try:
        body = orjson.loads(raw.http_response.content)  # read whole: the call was not streamed
    except ValueError as exc:
        raise connection_error(provider, exc) from None
    if not isinstance(body, dict):
        raise connection_error(provider, ValueError(f"the answer is a JSON {type(body).__name__}, not an object"))
    return body


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the provider asked us to wait (`retry-after-ms`, else `retry-after`)."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return float(value) * scale
            except ValueError:
                continue
    return None


def stream_lines(
    fetch: Callable[[Path], None], folder: Path, name: str, parse: Callable[[Mapping[str, Any]], Outcome]
) -> Iterator[Outcome]:
    """Download to a file first (a cut-off download raises and leaves nothing half-read), then parse line by line."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{name}.", suffix=".part", delete=False) as tmp:
        part = Path(tmp.name)
    try:
        fetch(part)
        for line in jsonl.read(part):
            yield parse(line)
    finally:
        part.unlink(missing_ok=True)
