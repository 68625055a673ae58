"""Anthropic's Messages API: `anthropic/<model>`.

- Requests: ``{"custom_id", "params": {model, max_tokens, system?, messages, ...params}}``; a batch is one create
  call carrying its requests (at most 100,000 or 256 MB), streamed from the shard. Every call sends
  `anthropic-version: 2026-10-21` (`anthropic_models.API_VERSION`), whose rules and each Claude generation's
  (`anthropic_models`) `validate` applies: no sampling parameters, no key the Messages request lacks, a prefill only
  up to Claude 4.5 and never ending in whitespace.
- Batches carry no metadata: an interrupted create is found again among the batches created after the recorded
  intent with the shard's request count (see `runners.batch`).
- Tokens: no exact offline tokenizer exists for Claude 3 and later; counts are a proxy (o200k_base times a factor)
  with a margin, unless the spec says otherwise, or exact from the free count_tokens endpoint after
  `nspec calibrate` (`count_request`, `AnthropicCounter`).
- Rate limits: `anthropic-ratelimit-{requests,tokens}-{limit,remaining}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from nspec.compiler.prices import Usage
from nspec.compiler.providers.contract import CacheCut, CacheStyle, Reasoning, as_sent, model_name
from nspec.compiler.providers.io import (
    BadLine,
    BatchView,
    Credentials,
    Outcome,
    RateHeaders,
    ShardLimits,
    counted,
    provider_id,
)
from nspec.errors import CompileError, NspecError
from nspec.prompt import Prompt
from nspec.runners.providers import (
    BaseProvider,
    Clients,
    NotText,
    answer_json,
    answer_text,
    chat_messages,
    chat_text,
    connection_error,
    guard,
    live_failure,
    live_outcome,
    not_text,
    sdk,
    sdk_kwargs,
    sdk_retries,
    status_error,
    stream_lines,
)
from nspec.runners.providers.anthropic_models import API_VERSION, PARAMS, SAMPLING, family, refusals, thinking_tokens
from nspec.runners.providers.pacing import http_client, http_module

# What count_tokens takes of a Messages request (docs.anthropic.com, "Count Message tokens"): the rest of a request
# (max_tokens, temperature, ...) makes no input tokens.
_COUNTED = ("model", "system", "messages", "tools", "tool_choice", "thinking")
# The fewest tokens a cached prefix holds, per model (platform.claude.com, "Prompt caching": "Cache limitations");
# below it a breakpoint silently caches nothing. Models not listed get the largest.
_CACHE_MINIMUM = {
    "claude-opus-4-1": 1024,
    "claude-opus-4": 1024,
    "claude-sonnet-4-5": 1024,
    "claude-sonnet-4": 1024,
    "claude-3-7-sonnet": 1024,
    "claude-sonnet-4-6": 2048,
    "claude-opus-4-7": 2048,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
}
CACHE_MINIMUM_DEFAULT = 4096  # Claude Haiku 4.5, Opus 4.5 and 4.6


def cache_minimum(model: str) -> int:
    """The fewest tokens ``model`` caches (a dated snapshot is its model's)."""
    name = re.sub(r"-\d{8}$", "", model)
    return _CACHE_MINIMUM.get(name, CACHE_MINIMUM_DEFAULT)


# A spec's names for the answer budget (`max_completion_tokens` is given as `max_tokens`).
_SPEC_NAMES = ("max_tokens", "max_completion_tokens")
_SOME_LIMIT = 1 << 20  # an answer budget that refuses nothing, for checking the other params
_TRAILING = "messages: final assistant content cannot end with trailing whitespace"


def _sent(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The entry's params that are sent (null leaves one out)."""
    given = entry.get("params")
    return {k: v for k, v in given.items() if v is not None} if isinstance(given, Mapping) else {}


# Result error types that say the request itself is at fault: sending it again cannot help.
_FINAL = ("invalid_request_error", "authentication_error", "permission_error")


def message_usage(usage: Mapping[str, Any] | None) -> Usage:
    """A Message's usage: Anthropic's `input_tokens` leaves out the tokens read from and
    written to the cache; the split of writes by TTL is in `cache_creation` (all five-minute where absent)."""
    usage = usage or {}
    read = int(usage.get("cache_read_input_tokens") or 0)
    written = int(usage.get("cache_creation_input_tokens") or 0)
    hour = int((usage.get("cache_creation") or {}).get("ephemeral_1h_input_tokens") or 0)
    uncached, output = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
    return Usage(uncached + read + written, output, read, written - hour, hour)


def parse_result(line: Mapping[str, Any]) -> Outcome:
    """A line of an Anthropic batch's results."""
    custom_id, result = line["custom_id"], line["result"]
    kind = result["type"]
    if kind == "succeeded":
        message = result["message"]
        if not isinstance(message["content"], list):  # blocks; a bare string is not what the API sends
            return not_text(custom_id, NotText(f"the answer's content is a {type(message['content']).__name__}"))
        try:
            text = answer_text(message["content"])
        except NotText as exc:
            return not_text(custom_id, exc)
        return Outcome.ok(custom_id, text, message.get("stop_reason"), message_usage(message.get("usage")))
    if kind == "errored":
        err = (result.get("error") or {}).get("error") or {}
        return Outcome(
            custom_id,
            "error",
            retryable=err.get("type") not in _FINAL,
            error={"code": err.get("type"), "message": err.get("message")},
        )
    if kind not in ("expired", "canceled"):
        raise ValueError(f"a result of type {kind!r:.40}")  # not a result this API writes: a bad line
    return Outcome(custom_id, "expired" if kind == "expired" else "cancelled", error={"code": kind, "message": None})


class Anthropic(BaseProvider):
    name = "anthropic"
    request_format = "anthropic"
    key_variables = ("NSPEC_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY")
    package = "anthropic"
    official_hosts = ("api.anthropic.com",)
    base_url_variable = "ANTHROPIC_BASE_URL"
    official_base_url = "https://api.anthropic.com"
    counts_tokens = True

    def shard_limits(self, entry: Mapping[str, Any]) -> ShardLimits:
        return ShardLimits(100_000, 256 * 1000 * 1000)

    def takes_prefill(self, entry: Mapping[str, Any]) -> bool:
        return family(model_name(entry)).prefill  # a final assistant message is continued, up to Claude 4.5

    def prefill_problem(self, entry: Mapping[str, Any], prefill: str) -> str | None:
        # Asked of Anthropic's rules as an assistant message (what request_line sends only where they take it).
        params = self.request_line(entry, "check", Prompt.ask(None, ""), _sent(entry), 1)["params"]
        continued = [*params["messages"], {"role": "assistant", "content": prefill.rstrip() or "."}]
        refused = [r for r in refusals({**params, "messages": continued}) if r.param == "messages"]
        if refused:
            return f"cannot continue a prefill: {refused[0].why} (Anthropic: {refused[0].message})"
        if prefill[-1:].isspace():
            return (
                f"refuses a prefill that ends in whitespace (Anthropic: {_TRAILING}); remove it (in YAML, a block "
                "scalar written `|-` or `>-` keeps no final newline)"
            )
        return None

    def refused_params(self, entry: Mapping[str, Any]) -> dict[str, str]:
        given = entry.get("params")
        params: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        line = self.request_line(entry, "check", Prompt.ask(None, ""), _sent(entry), _SOME_LIMIT)
        out: dict[str, str] = {}
        for refusal in refusals(line["params"]):
            key = refusal.param
            if key == "max_tokens" and key not in params:
                key = "max_completion_tokens"  # the answer budget, in the spec's other name
            if params.get(key) is None or key in out:
                continue
            out[key] = (
                f"{entry['id']} refuses this: {refusal.why} (Anthropic, anthropic-version {API_VERSION}: "
                f"{refusal.message})"
            )
        for key, value in params.items():
            if value is None and (key in SAMPLING or key not in PARAMS) and key not in _SPEC_NAMES:
                why = "it takes no sampling parameters" if key in SAMPLING else "it is no parameter of its request"
                out[key] = f"Anthropic's Messages API (anthropic-version {API_VERSION}): {why}"
            elif value is None and key == "thinking":
                takes = " or ".join(family(model_name(entry)).thinking_types())
                out[key] = f"{entry['id']} takes thinking of type {takes} (Anthropic)"
        return out

    def reasoning(self, entry: Mapping[str, Any]) -> Reasoning | None:
        thinking = thinking_tokens({"model": model_name(entry), **_sent(entry)})
        if thinking is None:
            return None
        least = {"output_config": {"effort": "low"}} if family(model_name(entry)).always_thinks else {}
        return Reasoning(*thinking, least)

    def request_line(
        self,
        entry: Mapping[str, Any],
        custom_id: str,
        prompt: Prompt,
        params: Mapping[str, Any],
        max_tokens: int,
    ) -> dict[str, Any]:
        prompt = as_sent(self, entry, prompt)
        given = {k: v for k, v in params.items() if v is not None}  # null: leave it out
        limit = given.pop("max_tokens", None) or given.pop("max_completion_tokens", None) or max_tokens
        given.pop("max_completion_tokens", None)
        body: dict[str, Any] = {"model": model_name(entry), "max_tokens": limit}
        if prompt.system is not None:
            body["system"] = prompt.system
        prefill = prompt.prefill
        if prefill is not None and prefill[-1:].isspace():  # its template does not (validate): a value filled in does
            raise CompileError(
                f"{entry['id']}: a prefill may not end in whitespace (Anthropic: {_TRAILING}), and this one "
                f"does once its placeholders are filled: {prefill[-40:]!r}"
            )
        body["messages"] = chat_messages(prompt, system=False)
        body.update(given)
        return {"custom_id": custom_id, "params": body}

    def cache_style(self, entry: Mapping[str, Any]) -> CacheStyle:
        return CacheStyle("breakpoints", cache_minimum(model_name(entry)))

    def shape_cache(self, line: dict[str, Any], prompt: Prompt, cut: CacheCut) -> dict[str, Any]:
        if cut.control or not cut.breakpoints:
            return line
        user = prompt.turns[0].text
        control: dict[str, Any] = {"type": "ephemeral"} if cut.ttl == "5m" else {"type": "ephemeral", "ttl": cut.ttl}
        blocks: list[dict[str, Any]] = []
        begin = 0
        for end in (*cut.boundaries, len(user)):
            if end > begin:
                block: dict[str, Any] = {"type": "text", "text": user[begin:end]}
                if end in cut.breakpoints:
                    block["cache_control"] = control
                blocks.append(block)
            begin = end
        params = line["params"]
        messages = [{**params["messages"][0], "content": blocks}, *params["messages"][1:]]
        return {**line, "params": {**params, "messages": messages}}

    def request_size(self, line: Mapping[str, Any], count: Callable[[str], int]) -> int:
        body = line["params"]
        text = json.dumps(body["messages"], ensure_ascii=False) + json.dumps(body.get("system", ""), ensure_ascii=False)
        return count(text) + int(body.get("max_tokens") or 0)

    def parse_result(self, line: Mapping[str, Any]) -> Outcome:
        return parse_result(line)

    def prompt_text(self, line: Mapping[str, Any]) -> str:
        params = line["params"]
        system = params.get("system")
        head = [system if isinstance(system, str) else chat_text([{"content": system}])] if system else []
        return "\n\n".join([*head, chat_text(params["messages"])])

    def count_request(self, line: Mapping[str, Any]) -> dict[str, Any] | None:
        params = line["params"]
        return {k: params[k] for k in _COUNTED if k in params}

    def token_counter(self, creds: Credentials) -> AnthropicCounter:
        return AnthropicCounter(creds)

    def batches(self, creds: Credentials) -> AnthropicBatches:
        return AnthropicBatches(creds)

    def model_names(self, creds: Credentials) -> frozenset[str] | None:
        """Anthropic's `GET /v1/models`, every page."""

        def call() -> frozenset[str]:
            return frozenset(model.id for model in _client(creds, sdk_retries(), "Anthropic").models.list())

        return guard("anthropic", "models", lambda exc: _error(creds, "", exc), call, objects=False)

    def live(self, creds: Credentials, limits: Mapping[str, Any]) -> AnthropicLive:
        return AnthropicLive(creds)

    def rate_headers(self, headers: Mapping[str, str]) -> RateHeaders:
        def pair(name: str) -> tuple[int | None, int | None]:
            return (
                _int(headers.get(f"anthropic-ratelimit-{name}-limit")),
                _int(headers.get(f"anthropic-ratelimit-{name}-remaining")),
            )

        return RateHeaders(pair("requests"), pair("tokens"))


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _error(creds: Credentials, model: str, exc: BaseException) -> NspecError | None:
    """The SDK's exception as nspec's, or None when it is not the SDK's."""
    import anthropic

    if isinstance(exc, anthropic.APIStatusError):
        body = exc.body.get("error") if isinstance(exc.body, dict) else None  # {"type": "error", "error": {...}}
        message = str(body.get("message")) if isinstance(body, dict) and body.get("message") else str(exc.message)
        return status_error("anthropic", exc.status_code, message, creds, model, exc.response.headers)
    if isinstance(exc, anthropic.APIConnectionError) or type(exc).__module__.startswith(("httpx", "httpcore")):
        return connection_error("anthropic", exc)
    return None


def _client(creds: Credentials, retries: int, kind: str) -> Any:
    """The SDK's client (``kind``: Anthropic or AsyncAnthropic) for these credentials. It sends the API version
    whose rules `validate` checks (`anthropic_models.API_VERSION`), whatever the installed SDK's default."""
    anthropic = sdk("anthropic", "anthropic")
    return getattr(anthropic, kind)(
        api_key=creds.api_key,
        base_url=creds.base_url,
        max_retries=retries,
        http_client=http_client(anthropic, kind.startswith("Async")),
        default_headers={**creds.headers, "anthropic-version": API_VERSION},
        default_query=dict(creds.query),
    )


class ShardBody:
    """A shard's request lines as the body of the create call, ``{"requests": [line, line, ...]}``, read from disk
    each time it is sent (the SDK sends it again on a retry): a 256 MB shard is never held, parsed or re-encoded.
    The lines keep their newlines (JSON whitespace); ``length`` is counted by the same reading that sends them."""

    def __init__(self, shard: Path) -> None:
        self.shard = shard
        self.length = sum(len(chunk) for chunk in self)

    def __iter__(self) -> Iterator[bytes]:
        yield b'{"requests":['
        chunk, sep = bytearray(), b""
        with open(self.shard, "rb") as fh:
            for line in fh:
                if line.strip():
                    chunk += sep + line
                    sep = b","
                if len(chunk) >= 1 << 20:
                    yield bytes(chunk)
                    chunk.clear()
        yield bytes(chunk) + b"]}"


class AnthropicBatches:
    """Anthropic's message batches. Every call reads its answer inside `guard`, so an answer of the wrong shape is a
    `MalformedResponse` naming the endpoint."""

    finds_exactly = False  # batches carry no metadata: found by size and time

    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self.client = _client(creds, sdk_retries(), "Anthropic")

    def _call(self, what: str, call: Callable[[], Any], objects: bool = True) -> Any:
        return guard("anthropic", what, lambda exc: _error(self.creds, what, exc), call, objects)

    def upload(self, shard: Path) -> str:
        return ""  # nothing to upload: the shard's lines go into the create call

    def create(self, file_id: str, shard: Path, metadata: dict[str, str]) -> str:
        body = ShardBody(shard)
        batch_type = sdk("anthropic", "anthropic").types.messages.MessageBatch
        headers = {"Content-Type": "application/json", "Content-Length": str(body.length)}

        def call() -> str:
            # Not retried by the SDK: a create whose answer was lost may have made a batch, which the runner finds
            # again (`find`) instead of paying for a second one.
            options = {"headers": headers, "max_retries": 0}
            batch = self.client.post("/v1/messages/batches", cast_to=batch_type, content=body, options=options)
            return provider_id(batch.id, "batch id")

        return str(self._call("message batches", call, objects=False))

    def find(self, metadata: dict[str, str], after: float) -> list[tuple[str, float]]:
        """Anthropic batches carry no metadata: candidates are batches created after the recorded intent (less a
        minute of clock skew) with the shard's request count, with their creation times."""
        wanted = int(metadata["requests"])

        def call() -> list[tuple[str, float]]:
            found = []
            for batch in self.client.messages.batches.list(limit=100):
                created = batch.created_at.timestamp()
                if created < after - 60:
                    break
                c = batch.request_counts
                if counted(c.processing, c.succeeded, c.errored, c.canceled, c.expired) == wanted:
                    found.append((provider_id(batch.id, "batch id"), created))
            return found

        return list(self._call("message batches", call))

    def poll(self, batch_id: str) -> BatchView:
        def call() -> BatchView:
            b = self.client.messages.batches.retrieve(batch_id)
            c = b.request_counts
            done = counted(c.succeeded, c.errored, c.canceled, c.expired)
            return BatchView(
                b.id, b.processing_status, b.processing_status == "ended", done, done + counted(c.processing)
            )

        view: BatchView = self._call("message batches", call)
        return view

    def failure(self, batch_id: str) -> str:
        return self.poll(batch_id).status

    def download(self, view: BatchView, folder: Path) -> Iterator[Outcome | BadLine]:
        yield from stream_lines(lambda dest: self._fetch(view.batch_id, dest), folder, view.batch_id, parse_result)

    def _fetch(self, batch_id: str, dest: Path) -> None:
        # The results' address is built from the (checked) batch id, never taken from the batch's `results_url`: the
        # key goes with the request, so only to the API's own host. Streamed to disk as the bytes arrive, unparsed.
        def call() -> None:
            response = self.client.get(
                f"/v1/messages/batches/{batch_id}/results",
                cast_to=http_module(sdk("anthropic", "anthropic")).Response,
                options={"headers": {"Accept": "application/binary"}},
                stream=True,
            )
            try:
                with open(dest, "wb") as fh:
                    for block in response.iter_bytes():
                        fh.write(block)
            finally:
                response.close()

        self._call("message batch results", call)

    def cancel(self, batch_id: str) -> None:
        self._call("message batches", lambda: self.client.messages.batches.cancel(batch_id))


class AnthropicCounter:
    """Anthropic's count_tokens (the SDK's retries off: calibrate retries)."""

    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self.client = _client(creds, 0, "Anthropic")

    def count(self, body: dict[str, Any]) -> int:
        try:
            return int(self.client.messages.count_tokens(**body).input_tokens)
        except Exception as exc:
            mapped = _error(self.creds, str(body.get("model")), exc)
            if mapped is None:
                raise
            raise mapped from None


class AnthropicLive:
    """One model's live messages (an async client; the SDK's retries off: the runner retries)."""

    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self.clients = Clients(lambda: _client(creds, 0, "AsyncAnthropic"))

    async def send(self, line: dict[str, Any]) -> tuple[Outcome, Mapping[str, str] | None]:
        params = line["params"]
        try:
            async with self.clients.client() as client:
                kwargs = sdk_kwargs(client.messages.create, params)
                raw = await client.messages.with_raw_response.create(**kwargs)
        except Exception as exc:
            return live_failure(line["custom_id"], exc, _error(self.creds, str(params.get("model")), exc)), None
        message = answer_json("anthropic", raw)
        result = {"custom_id": line["custom_id"], "result": {"type": "succeeded", "message": message}}
        return live_outcome("anthropic", lambda: parse_result(result)), raw.headers

    async def close(self) -> None:
        await self.clients.close()


PROVIDER = Anthropic()
