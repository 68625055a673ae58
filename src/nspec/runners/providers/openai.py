"""OpenAI, and servers that speak its API (vLLM, llama.cpp, LM Studio...): `openai/<model>` and
`openai-compatible/<model>`.

- Requests: ``{"custom_id", "method": "POST", "url", "body"}`` for the chat completions endpoint
  (``{model, messages, ...}``, the default) or the Responses API (`endpoint: responses`: ``{model, instructions,
  input, ...}``), at most 50,000 lines and 200 MB per file. A spec's chat-style parameters are given to the endpoint
  in its own names: the answer budget (`max_tokens`) as `max_completion_tokens` (chat; OpenAI's reasoning models
  refuse `max_tokens`) or `max_output_tokens` (responses), `reasoning_effort` and `verbosity` as `reasoning.effort`
  and `text.verbosity` for responses. A parameter set to null is left out (to undo one a `defaults:` gives). What a
  model family refuses (`openai_models`) is a `validate` error naming the parameter. Servers that speak OpenAI's
  format take `max_tokens`.
- Batches: upload the file, create the batch on the shard's endpoint with the run's metadata (so an interrupted
  create is found again), poll, download the output and error files. An OpenAI-compatible server has a batch API
  only with `batch_api: true`.
- Tokens: tiktoken's `o200k_base` for gpt-4o, 4.1, 4.5, 5 and 5.x and the o-series, `cl100k_base` for gpt-4 and
  3.5, exact; a model of another family (one newer than nspec) is counted by the o200k proxy with its margin.
- Rate limits: `x-ratelimit-{limit,remaining}-{requests,tokens}`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from nspec.compiler.providers.contract import (
    OPENAI_CHAT,
    REASONING_TOKENS,
    CacheCut,
    CacheStyle,
    Reasoning,
    as_sent,
    model_name,
)
from nspec.compiler.providers.io import (
    BatchView,
    Credentials,
    Outcome,
    RateHeaders,
    ShardLimits,
    counted,
)
from nspec.compiler.tokenizers import Tokenizer, encoding
from nspec.errors import NspecError
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
)
from nspec.runners.providers.file_batches import CLOCK_SKEW, FileBatches, stream_content
from nspec.runners.providers.openai_models import (
    CHAT,
    FLEX_MODELS,
    RESPONSES,
    Refusal,
    family,
    reasoning_effort,
    refusals,
    rule,
)
from nspec.runners.providers.pacing import http_client

# The model families whose tokenizer is known: o200k_base (checked first), then cl100k_base.
_O200K = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "codex-mini")
_CL100K = ("gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada")
ENDPOINTS = {"chat": CHAT, "responses": RESPONSES}


def parse_result(line: Mapping[str, Any]) -> Outcome:
    """A line of an OpenAI batch output or error file (or of `vllm run-batch`'s output, errors inline)."""
    custom_id = line["custom_id"]
    error, response = line.get("error"), line.get("response")
    if not isinstance(response, dict | None) or not isinstance(error, dict | None):
        raise TypeError("`response` and `error` must be objects or null")
    if error:
        code = error.get("code")
        status = "expired" if code == "batch_expired" else "cancelled" if code == "batch_cancelled" else "error"
        return Outcome(custom_id, status, error={"code": code, "message": error.get("message")})
    body = (response or {}).get("body") or {}
    if not response or response.get("status_code") != 200:
        err = body["error"] if isinstance(body.get("error"), dict) else body  # vLLM puts the error at the top
        retryable = (response or {}).get("status_code", 500) >= 500 or (response or {}).get("status_code") == 429
        return Outcome(
            custom_id,
            "error",
            retryable=retryable,
            error={
                "code": err.get("code") or err.get("type") or str((response or {}).get("status_code")),
                "message": err.get("message"),
            },
        )
    if body.get("object") == "response":
        return _response_outcome(custom_id, body)
    choice = body["choices"][0]
    usage = body.get("usage") or {}
    message = choice["message"]
    try:
        text = answer_text(message.get("content"))
    except NotText as exc:
        return not_text(custom_id, exc)
    refusal = message.get("refusal")  # a refusal under structured output has no content
    return Outcome(
        custom_id,
        "ok",
        text or (refusal if isinstance(refusal, str) else ""),
        choice.get("finish_reason"),
        usage.get("prompt_tokens") or 0,
        usage.get("completion_tokens") or 0,
        cache_read_tokens=int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
    )


def _response_outcome(custom_id: str, body: Mapping[str, Any]) -> Outcome:
    """A Responses API response: the text of its output messages (or a refusal's), `length` when it stopped at
    max_output_tokens; a response that failed is an error."""
    usage = body.get("usage") or {}
    if body.get("status") == "failed":
        error = body.get("error") or {}
        return Outcome(custom_id, "error", error={"code": error.get("code"), "message": error.get("message")})
    parts = [
        part.get("text") or part.get("refusal") or ""
        for item in body.get("output") or []
        if item.get("type") == "message"
        for part in item.get("content") or []
        if part.get("type") in ("output_text", "refusal")
    ]
    if not all(isinstance(part, str) for part in parts):
        return not_text(custom_id, NotText("a text part of the answer is not text"))
    incomplete = (body.get("incomplete_details") or {}).get("reason")
    finish = "length" if incomplete == "max_output_tokens" else incomplete or "stop"
    return Outcome(
        custom_id,
        "ok",
        "".join(parts),
        finish,
        usage.get("input_tokens") or 0,
        usage.get("output_tokens") or 0,
        cache_read_tokens=int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0),
    )


# Where a spec's chat-style parameter lands in a Responses API request.
_SPEC_NAMES = {
    "max_tokens": ("max_tokens", "max_output_tokens", "max_completion_tokens"),
    "reasoning_effort": ("reasoning_effort", "reasoning"),
    "verbosity": ("verbosity", "text"),
    "response_format": ("response_format", "text"),
}


def _spec_key(param: str, params: Mapping[str, Any]) -> str:
    """The spec's name (a key of ``params`` where one fits) for a request ``param`` an endpoint refused."""
    where = param.split(".", 1)[0]
    return next((k for k, names in _SPEC_NAMES.items() if where in names and k in params), where)


def _responses_params(params: dict[str, Any]) -> dict[str, Any]:
    """Chat-style parameters in the Responses API's names: reasoning_effort → reasoning.effort, verbosity →
    text.verbosity, a json_schema response_format → text.format; the rest as they are."""
    out = dict(params)
    if "reasoning_effort" in out:
        out["reasoning"] = {**out.get("reasoning", {}), "effort": out.pop("reasoning_effort")}
    text: dict[str, Any] = dict(out.pop("text", {}))
    if "verbosity" in out:
        text["verbosity"] = out.pop("verbosity")
    response_format = out.pop("response_format", None)
    if isinstance(response_format, Mapping) and response_format.get("type") == "json_schema":
        text["format"] = {"type": "json_schema", **response_format["json_schema"]}
    if text:
        out["text"] = text
    return out


class OpenAI(BaseProvider):
    name = "openai"
    lists_models = True  # whether `model_names` asks its `GET /models`
    request_format = OPENAI_CHAT
    key_variables = ("NSPEC_OPENAI_API_KEY", "OPENAI_API_KEY")
    package = "openai"
    official_hosts: tuple[str, ...] = ("api.openai.com",)
    base_url_variable = "OPENAI_BASE_URL"
    official_base_url: str | None = "https://api.openai.com/v1"
    token_counts = "exact (tiktoken: o200k_base; cl100k_base for gpt-4 and gpt-3.5)"
    limit_key = "max_completion_tokens"
    endpoints = tuple(ENDPOINTS)

    def shard_limits(self, entry: Mapping[str, Any]) -> ShardLimits:
        return ShardLimits(50_000, 200 * 1000 * 1000)

    # OpenAI caches every prompt of 1,024 tokens or more by itself, in steps of 128 tokens, routed by a hash of its
    # start and the request's `prompt_cache_key` (platform.openai.com/docs/guides/prompt-caching).
    caches_prompts = True
    takes_cache_key = True

    def connection(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        # Flex calls wait for spare capacity: OpenAI's guide raises the client's timeout to 15 minutes for them.
        return {"timeout": 900.0} if entry.get("mode") == "flex" else {}

    def takes_flex(self, entry: Mapping[str, Any]) -> bool:
        return self.name == "openai" and model_name(entry).startswith(FLEX_MODELS)

    def cache_style(self, entry: Mapping[str, Any]) -> CacheStyle | None:
        if not self.caches_prompts:
            return None
        return CacheStyle("prefix", 1024, 128, key=self.takes_cache_key)

    def shape_cache(self, line: dict[str, Any], prompt: Prompt, cut: CacheCut) -> dict[str, Any]:
        if cut.control or not self.takes_cache_key:
            return line
        return {**line, "body": {**line["body"], "prompt_cache_key": cut.group}}

    def base_model(self, entry: Mapping[str, Any]) -> str:
        """The OpenAI model the entry runs (its rules and tokenizer): the model itself, here."""
        return model_name(entry)

    def tokenizer(self, model: str, setting: str | Mapping[str, Any] | None) -> Tokenizer:
        if setting is not None:
            return super().tokenizer(model, setting)
        if model.startswith(_O200K):
            return encoding("o200k_base")
        if model.startswith(_CL100K):
            return encoding("cl100k_base")
        return super().tokenizer(model, None)  # a family nspec does not know: counted by the proxy, and said so

    def model_issues(self, entry: Mapping[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
        issues = super().model_issues(entry)  # with what refused_params finds
        given = entry.get("params")
        params: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        for refusal in self._refusals(entry):
            if _spec_key(refusal.param, params) not in params:  # not a param's fault (flex, say): the entry's
                issues.append((("params",), self._refused(entry, refusal, None)))
        return issues

    def refused_params(self, entry: Mapping[str, Any]) -> dict[str, str]:
        given = entry.get("params")
        params: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        out: dict[str, str] = {}
        if str(entry.get("endpoint", "chat")) not in ENDPOINTS:
            return out  # an endpoint it does not have: that is the entry's issue (`model_issues`)
        for refusal in self._refusals(entry):
            key = _spec_key(refusal.param, params)
            if params.get(key) is not None:
                out.setdefault(key, self._refused(entry, refusal, key))
        effort = params.get("reasoning_effort")
        endpoint = self.endpoint_path(entry)
        for key, value in params.items():
            why = rule(self.base_model(entry), key, effort, endpoint) if value is None else None
            if why is not None:
                out[key] = f"{why} (OpenAI)"
        return out

    def _refusals(self, entry: Mapping[str, Any]) -> list[Refusal]:
        """What OpenAI refuses in a line of the entry (its params as sent), for the model it runs."""
        if str(entry.get("endpoint", "chat")) not in ENDPOINTS:
            return []
        given = entry.get("params")
        params = {k: v for k, v in given.items() if v is not None} if isinstance(given, Mapping) else {}
        line = self.request_line(entry, "check", Prompt.ask(None, ""), params, 1)
        return refusals({**line["body"], "model": self.base_model(entry)}, self.endpoint_path(entry))

    def _refused(self, entry: Mapping[str, Any], refusal: Refusal, key: str | None) -> str:
        if refusal.code is None:  # a key the endpoint's request does not have
            request = "Responses" if self.endpoint_path(entry) == RESPONSES else "chat completions"
            return (
                f"`{refusal.param}` is no parameter of OpenAI's {request} request (OpenAI answers 400: "
                f"{refusal.message}); check its name"
            )
        hint = f", or leave it out for this model with `{key}: null` in the model's own params" if key else ""
        return f"{entry['id']} refuses this: {refusal.message} (OpenAI: {refusal.code}); change it{hint}"

    def reasoning(self, entry: Mapping[str, Any]) -> Reasoning | None:
        given = entry.get("params")
        asked = given.get("reasoning_effort") if isinstance(given, Mapping) else None
        model = self.base_model(entry)
        effort = reasoning_effort(model, asked)
        if effort is None:
            return None
        fam = family(model)
        said = f"at reasoning_effort {effort}" + ("" if asked else ", its default")
        if not fam.efforts:
            said = "always (it takes no reasoning_effort)"
        least = {"reasoning_effort": fam.efforts[0]} if fam.efforts else {}
        return Reasoning(said, REASONING_TOKENS.get(effort, REASONING_TOKENS["medium"]), least)

    def endpoint_path(self, entry: Mapping[str, Any]) -> str:
        """The OpenAI endpoint the entry's lines go to (its rules), whatever the service names it."""
        return ENDPOINTS[str(entry.get("endpoint", "chat"))]

    def endpoint(self, entry: Mapping[str, Any]) -> str:
        """The `url` of the entry's request lines (its batch endpoint)."""
        return ENDPOINTS[str(entry.get("endpoint", "chat"))]

    def request_line(
        self,
        entry: Mapping[str, Any],
        custom_id: str,
        prompt: Prompt,
        params: Mapping[str, Any],
        max_tokens: int,
    ) -> dict[str, Any]:
        return self.line_of(entry, custom_id, as_sent(self, entry, prompt), params, max_tokens)

    def line_of(
        self, entry: Mapping[str, Any], custom_id: str, prompt: Prompt, params: Mapping[str, Any], max_tokens: int
    ) -> dict[str, Any]:
        """The request line of ``prompt`` as sent (its prefill, if any, one the model continues)."""
        given = {k: v for k, v in params.items() if v is not None}  # null: leave it out
        limit = given.pop("max_tokens", None) or given.pop("max_completion_tokens", None) or max_tokens
        given.pop("max_completion_tokens", None)
        body: dict[str, Any] = {"model": model_name(entry)}
        if entry.get("endpoint") == "responses":
            if prompt.system is not None:
                body["instructions"] = prompt.system
            body["input"] = chat_messages(prompt, system=False)
            body["max_output_tokens"] = limit
            body.update(_responses_params(given))
        else:
            body["messages"] = chat_messages(prompt)
            body[self.limit_key] = limit
            body.update(given)
        if entry.get("mode") == "flex":
            body["service_tier"] = "flex"
        return {"custom_id": custom_id, "method": "POST", "url": self.endpoint(entry), "body": body}

    def request_size(self, line: Mapping[str, Any], count: Callable[[str], int]) -> int:
        body = line["body"]
        budget = body.get("max_completion_tokens") or body.get("max_tokens") or body.get("max_output_tokens") or 0
        texts = json.dumps([body.get("instructions"), body.get("messages"), body.get("input")], ensure_ascii=False)
        return count(texts) + int(budget)

    def structured_output(self, params: Mapping[str, Any], name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        response_format = {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}
        return {"response_format": response_format, **params}

    def parse_result(self, line: Mapping[str, Any]) -> Outcome:
        return parse_result(line)

    def prompt_text(self, line: Mapping[str, Any]) -> str:
        body = line["body"]
        if "input" in body:
            head = [body["instructions"]] if body.get("instructions") else []
            return "\n\n".join([*head, chat_text(body["input"])])
        return chat_text(body["messages"])

    def batches(self, creds: Credentials) -> OpenAIBatches:
        return OpenAIBatches(self.name, creds)

    def model_names(self, creds: Credentials) -> frozenset[str] | None:
        """Its `GET /models` (OpenAI's, or a service's that `lists_models`)."""
        if not self.lists_models:
            return None

        def call() -> frozenset[str]:
            return frozenset(model.id for model in _client(self.name, creds, sdk_retries(), False).models.list())

        return guard(self.name, "models", lambda exc: _error(self.name, creds, "", exc), call, objects=False)

    def live(self, creds: Credentials, limits: Mapping[str, Any]) -> OpenAILive:
        return OpenAILive(self.name, creds)

    def rate_headers(self, headers: Mapping[str, str]) -> RateHeaders:
        return RateHeaders(
            (_int(headers.get("x-ratelimit-limit-requests")), _int(headers.get("x-ratelimit-remaining-requests"))),
            (_int(headers.get("x-ratelimit-limit-tokens")), _int(headers.get("x-ratelimit-remaining-tokens"))),
        )


class OpenAICompatible(OpenAI):
    caches_prompts = False  # what a server does is its own; nothing is shaped for it

    """A server that speaks OpenAI's API at `base_url`: `max_tokens`, a batch API only when `batch_api: true`, no
    structured output (not every server has it), and no key of its own (OpenAI's variables, as the SDK reads)."""

    name = "openai-compatible"
    lists_models = False  # a server of the user's keeps its own list, or none: not asked
    # A server of the user's: its key is named with api_key_env, unless it is on this machine.
    official_hosts: tuple[str, ...] = ()
    official_base_url: str | None = None
    token_counts = BaseProvider.token_counts
    limit_key = "max_tokens"
    optional_batch = True
    takes_batch_api = True
    priced = False

    def refused_params(self, entry: Mapping[str, Any]) -> dict[str, str]:
        return {}  # the server's models, not OpenAI's: its own rules and extensions (vLLM's continue_final_message)

    def reasoning(self, entry: Mapping[str, Any]) -> Reasoning | None:
        return None  # not known of a server's model

    def model_issues(self, entry: Mapping[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
        issues = BaseProvider.model_issues(self, entry)  # the server's models, not OpenAI's: its own rules
        if "base_url" not in entry and self.official_base_url is None:
            issues.append(((), "an openai-compatible model needs `base_url`"))
        if entry.get("mode") == "batch" and not self.has_batch(entry):
            issues.append((("mode",), f"`mode: batch` on an {self.name} server needs `batch_api: true`"))
        return issues

    def has_batch(self, entry: Mapping[str, Any]) -> bool:
        return entry.get("batch_api") not in (None, False)

    def shard_limits(self, entry: Mapping[str, Any]) -> ShardLimits:
        said = entry.get("batch_api")
        said = said if isinstance(said, Mapping) else {}
        lines, size = super().shard_limits(entry)
        return ShardLimits(int(said.get("max_requests", lines)), int(said.get("max_bytes", size)))

    def connection(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        said = entry.get("batch_api")
        return {"completion_window": str(said.get("completion_window", "24h"))} if isinstance(said, Mapping) else {}

    def takes_prefill(self, entry: Mapping[str, Any]) -> bool:
        # vLLM continues a final assistant message when asked to (its `continue_final_message` extension).
        params = entry.get("params")
        return isinstance(params, Mapping) and params.get("continue_final_message") is True

    def tokenizer(self, model: str, setting: str | Mapping[str, Any] | None) -> Tokenizer:
        return BaseProvider.tokenizer(self, model, setting)  # a server's model: its tokenizer is not OpenAI's

    def structured_output(self, params: Mapping[str, Any], name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        return dict(params)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _error(provider: str, creds: Credentials, model: str, exc: BaseException) -> NspecError | None:
    """The SDK's exception as nspec's, or None when it is not the SDK's."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}  # the error object: message, type, code
        message = str(body.get("message") or exc.message)
        return status_error(provider, exc.status_code, message, creds, model, exc.response.headers)
    if isinstance(exc, openai.APIConnectionError) or type(exc).__module__.startswith(("httpx", "httpcore")):
        return connection_error(provider, exc)  # also a body cut off mid-download
    return None


def _client(provider: str, creds: Credentials, retries: int, is_async: bool) -> Any:
    """The SDK's client for these credentials."""
    openai = sdk("openai", provider)
    return (openai.AsyncOpenAI if is_async else openai.OpenAI)(
        api_key=creds.api_key,
        base_url=creds.base_url,
        max_retries=retries,
        http_client=http_client(openai, is_async),
        default_headers=dict(creds.headers),
        default_query=dict(creds.query),
        **({"timeout": float(creds.options["timeout"])} if "timeout" in creds.options else {}),
    )


class OpenAIBatches(FileBatches):
    """Files and batches, for OpenAI and OpenAI-compatible servers."""

    def __init__(self, provider: str, creds: Credentials) -> None:
        super().__init__(provider, creds)
        self.client = _client(provider, creds, sdk_retries(), False)

    def _error(self, model: str, exc: BaseException) -> NspecError | None:
        return _error(self.provider, self.creds, model, exc)

    def parse_line(self, line: Mapping[str, Any]) -> Outcome:
        return parse_result(line)

    def _upload(self, shard: Path) -> Any:
        with open(shard, "rb") as fh:
            return self.client.files.create(file=(shard.name, fh), purpose="batch")

    def _create(self, file_id: str, line: Mapping[str, Any], metadata: dict[str, str]) -> Any:
        create = self.client.with_options(max_retries=0).batches.create
        window = self.creds.options.get("completion_window", "24h")
        return create(input_file_id=file_id, endpoint=line["url"], completion_window=window, metadata=metadata)

    def _listed(self, after: float) -> Iterator[tuple[Any, float]]:
        for batch in self.client.batches.list(limit=100):
            created = float(batch.created_at)
            if created < after - CLOCK_SKEW:  # listed newest first: older ones cannot be ours
                return
            yield batch, created

    def _get(self, batch_id: str) -> Any:
        return self.client.batches.retrieve(batch_id)

    def _view(self, b: Any) -> BatchView:
        counts = b.request_counts
        done = counted(getattr(counts, "completed", 0), getattr(counts, "failed", 0))
        files = tuple(f for f in (b.output_file_id, b.error_file_id) if f)
        ended = b.status in ("completed", "failed", "expired", "cancelled")
        return BatchView(b.id, b.status, ended, done, counted(getattr(counts, "total", 0)), files)

    def _failure(self, b: Any) -> str:
        errors = b.errors.data if b.errors and b.errors.data else []
        return "; ".join(f"line {e.line}: {e.code}: {e.message}" for e in errors) or str(b.status)

    def _download(self, file_id: str, dest: Path) -> None:
        stream_content(self.client, file_id, dest)

    def _cancel(self, batch_id: str) -> None:
        self.client.batches.cancel(batch_id)


class OpenAILive:
    """One model's live chat completions (an async client; the SDK's retries off: the runner retries)."""

    def __init__(self, provider: str, creds: Credentials) -> None:
        self.provider, self.creds = provider, creds
        self.clients = Clients(lambda: _client(provider, creds, 0, True))

    async def send(self, line: dict[str, Any]) -> tuple[Outcome, Mapping[str, str] | None]:
        body = line["body"]
        try:
            async with self.clients.client() as client:
                api = client.responses if str(line.get("url")).endswith("/responses") else client.chat.completions
                raw = await api.with_raw_response.create(**sdk_kwargs(api.create, body))
        except Exception as exc:
            mapped = _error(self.provider, self.creds, str(body.get("model")), exc)
            return live_failure(line["custom_id"], exc, mapped), None
        response = {"status_code": 200, "body": answer_json(self.provider, raw)}
        result = {"custom_id": line["custom_id"], "response": response}
        return live_outcome(self.provider, lambda: parse_result(result)), raw.headers

    async def close(self) -> None:
        await self.clients.close()


PROVIDER = OpenAI()
COMPATIBLE = OpenAICompatible()
