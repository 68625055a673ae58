"""The built-in providers, one module each (`openai`: OpenAI and OpenAI-compatible servers; `anthropic`; `local`: the
local engine), registered through the `nspec.providers` entry points like any plugin, and what they share: a base
with the interface's defaults, the import of an SDK with the pip command when it is missing, the mapping of an HTTP
status to nspec's error tree, and the boundary where a provider's bytes are read as untrusted input — control calls
through `guard`, result files through `stream_lines` (downloaded whole first, then parsed a line at a time, a bad
line kept and named), answers through `answer_text` and `checked`."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import json
import math
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import orjson

from nspec.compiler.providers.contract import (
    CacheCut,
    CacheStyle,
    Provider,
    Reasoning,
    as_sent,
    message_text,
    model_name,
    request_id,
)
from nspec.compiler.providers.io import BadLine, Credentials, Outcome, RateHeaders, TokenCounter
from nspec.compiler.tokenizers import Tokenizer, tokenizer_from_setting
from nspec.errors import (
    AuthenticationFailed,
    BadRequest,
    ConnectionFailed,
    Gone,
    MalformedResponse,
    ModelNotFound,
    NspecError,
    PermissionDenied,
    RateLimited,
    ServerError,
    UserError,
)
from nspec.prompt import Prompt
from nspec.secrets import redact

# The environment variable that overrides the SDKs' own retry count for control calls (tests set 0).
SDK_RETRIES_ENV = "NSPEC_SDK_MAX_RETRIES"
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

    def model_names(self, creds: Credentials) -> frozenset[str] | None:
        """The names of the models the provider serves, from its free list of them (asked before the first paid
        request: a misspelt id is refused then, not hours later); None where nspec reads no such list."""
        return None

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

    def shape_cache(self, line: dict[str, Any], prompt: Prompt, cut: CacheCut) -> dict[str, Any]:
        return line

    def request_size(self, line: Mapping[str, Any], count: Callable[[str], int]) -> int:
        return count(json.dumps(line, ensure_ascii=False))  # the whole line: more than the prompt, never less

    def structured_output(self, params: Mapping[str, Any], name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        return dict(params)

    def send_key(self, line: Mapping[str, Any]) -> bytes | None:
        return None  # an API's requests go as compiled

    def context_window(self, entry: Mapping[str, Any]) -> int | None:
        return None  # an API's models change behind their names: the spec's max_context says it

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


def chat_messages(prompt: Prompt, system: bool = True, **prefill_fields: Any) -> list[dict[str, Any]]:
    """A chat request's messages in OpenAI's shape: the system prompt (unless ``system`` is False: an API that takes
    it apart), the turns, and the prefill as a final assistant message (with whatever fields the API marks a
    continued message by)."""
    messages: list[dict[str, Any]] = []
    for role, text in prompt.messages():
        if role == "system" and not system:
            continue
        messages.append({"role": role, "content": text})
    if prompt.prefill is not None:
        messages[-1].update(prefill_fields)
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


def live_failure(custom_id: str, exc: Exception, mapped: NspecError | None) -> Outcome:
    """The outcome of a live call that raised ``exc`` (``mapped``: as nspec's error, None where it is not the SDK's):
    a refusal of the request as malformed is the request's result (`request_failure`); anything else is raised, as
    nspec's error where it maps to one."""
    if mapped is None:
        raise exc
    failed = request_failure(custom_id, mapped)
    if failed is None:
        raise mapped from None
    return failed


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
    `max_tokens` (Mistral's and Together's): a spec's parameter named as its API names it (``renamed``) must be one
    of its request's fields (``request_fields``, a copy of its SDK's request type)."""

    request_fields: frozenset[str] = frozenset()
    renamed: Mapping[str, str] = {}
    request_name = ""  # the request, in words, for messages: "Mistral's chat completion request"
    refusal = ""  # how the API refuses an unknown parameter, where it says: " (it answers 422)"
    prefill_fields: Mapping[str, Any] = {}  # what marks a final assistant message as one the model continues

    def request_line(
        self,
        entry: Mapping[str, Any],
        custom_id: str,
        prompt: Prompt,
        params: Mapping[str, Any],
        max_tokens: int,
    ) -> dict[str, Any]:
        sent = as_sent(cast(Provider, self), entry, prompt)  # a subclass is a whole provider; this base is not
        messages = chat_messages(sent, **self.prefill_fields)
        body: dict[str, Any] = {"model": model_name(entry), "messages": messages, "max_tokens": max_tokens}
        body.update({self.renamed.get(k, k): v for k, v in params.items() if v is not None})  # null: left out
        return {"custom_id": custom_id, "body": body}

    def refused_params(self, entry: Mapping[str, Any]) -> dict[str, str]:
        given = entry.get("params")
        params: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        return {
            name: f"{self.request_name} has no parameter {self.renamed.get(name, name)!r}{self.refusal}"
            for name in params
            if self.renamed.get(name, name) not in self.request_fields
        }

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


def live_outcome(provider: str, parse: Callable[[], Outcome]) -> Outcome:
    """A live answer parsed (by ``parse``) like a result line: an answer that is not a well-formed result (no
    choices, a field of the wrong type) is a malformed response, sent again."""
    try:
        return checked(parse())
    except DATA_ERRORS as exc:
        raise MalformedResponse(provider, f"{provider}: the answer is not a well-formed result ({exc})"[:500]) from None


# Limits on what a provider may ask us to wait (Retry-After): beyond it, the provider is not busy but closed to us for
# now, and the run stops sending to it instead of sleeping (see `runners.live`).
RETRY_AFTER_CAP = 300.0


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the provider asked us to wait (`retry-after-ms`, else `retry-after` as seconds or as an HTTP date),
    or None when it said nothing usable: a value that is not a finite, non-negative number is ignored, never slept
    on (`inf` would be forever, `nan` or a negative value no wait at all)."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if not value:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            seconds = _http_date_seconds(value) if scale == 1.0 else math.nan
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


def _http_date_seconds(value: str) -> float:
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return math.nan
    if when.tzinfo is None:  # an HTTP date is in GMT; one without a zone is read so
        return math.nan
    return max(0.0, when.timestamp() - time.time())


# What reading a provider's answer raises when the answer is not what its API documents (pydantic's and orjson's
# errors are ValueErrors; an SDK's own JSON decoding recurses, so a body nested 100,000 deep is a RecursionError; a
# number past a float's range, made a count, an OverflowError).
DATA_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError, OverflowError)
T = TypeVar("T")


def guard(
    provider: str,
    what: str,
    mapper: Callable[[BaseException], NspecError | None],
    call: Callable[[], T],
    objects: bool = True,
) -> T:
    """Run ``call`` — a provider call and the reading of its answer — with every failure in nspec's terms: the SDK's
    exceptions as ``mapper`` maps them; an answer of the wrong shape (a gateway's HTML page with status 200, a body
    cut off, a field missing or of the wrong type, an unsafe id) as `MalformedResponse` naming ``what``, the
    endpoint. With ``objects`` (a call about a batch or a file, not a create), a 404 is `Gone`, not a model the
    provider does not know. Exit 1 never comes from what a provider sends."""
    try:
        return call()
    except NspecError:
        raise
    except Exception as exc:
        mapped = mapper(exc)
        if objects and isinstance(mapped, ModelNotFound):
            raise Gone(
                provider,
                f"{provider} {what}: not found (404): the provider has no such object (it may be past its retention)",
            ) from None
        if mapped is not None:
            raise mapped from None
        if isinstance(exc, DATA_ERRORS):
            message = f"{provider} {what}: the answer is not what the API documents ({type(exc).__name__}: {exc})"
            raise MalformedResponse(provider, message[:500]) from None
        raise


class NotText(ValueError):
    """An answer whose content is not text (a number, an object): an error outcome, not a crash."""


# Content parts that carry the answer's text; parts of other types (thinking, tool calls) are not the answer.
_TEXT_PARTS = ("text", "output_text")


def answer_text(content: Any) -> str:
    """The text of an answer's content: a string, or a list of parts whose text parts are joined (Anthropic's blocks,
    and what some OpenAI-compatible servers send); None is no text. Anything else raises `NotText`."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise NotText(f"the answer's content is a {type(content).__name__}, not text")
    texts = []
    for part in content:
        if not isinstance(part, Mapping):
            raise NotText(f"a part of the answer's content is a {type(part).__name__}, not an object")
        if part.get("type") in _TEXT_PARTS:
            if not isinstance(part.get("text"), str):
                raise NotText("a text part of the answer has no text")
            texts.append(part["text"])
    return "".join(texts)


def not_text(custom_id: str, reason: NotText) -> Outcome:
    """The outcome of an answer that is not text: an error, sent again while the retry attempts last."""
    return Outcome(custom_id, "error", error={"code": "not_text", "message": str(reason)})


_STATUSES = ("ok", "error", "expired", "cancelled")
# The longest answer taken: more characters than any model's output limit writes (128K tokens are about 0.5 MB).
MAX_ANSWER_CHARS = 4_000_000
# The longest line of a result file read: a longer one is read past in pieces, never held, and is a bad line.
MAX_LINE_BYTES = 32 * 1024 * 1024


def checked(outcome: Outcome) -> Outcome:
    """``outcome`` if every field has its type (a parser reads what a provider wrote: a wrong type raises here, a
    bad line, instead of reaching the results file and failing the scoring of every rerun)."""
    if not isinstance(outcome.custom_id, str) or not outcome.custom_id:
        raise TypeError(f"the request id is {outcome.custom_id!r:.60}, not a string")
    if outcome.status not in _STATUSES:
        raise ValueError(f"status {outcome.status!r:.40}")
    if outcome.text is not None and not isinstance(outcome.text, str):
        raise TypeError(f"the answer is a {type(outcome.text).__name__}, not text")
    if outcome.text is not None and len(outcome.text) > MAX_ANSWER_CHARS:
        raise ValueError(f"the answer has {len(outcome.text):,} characters, more than any model writes")
    if outcome.finish_reason is not None and not isinstance(outcome.finish_reason, str):
        raise TypeError(f"the finish reason is {outcome.finish_reason!r:.40}")
    if outcome.error is not None and not isinstance(outcome.error, dict):
        raise TypeError(f"the error is {outcome.error!r:.60}")
    for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cache_write_1h_tokens"):
        count = getattr(outcome, name)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise TypeError(f"{name} is {count!r:.40}")
    if outcome.error is not None:  # a provider's words, kept as text
        error = {k: v if v is None or isinstance(v, str | int) else str(v) for k, v in outcome.error.items()}
        outcome = Outcome(**{**outcome.__dict__, "error": error})
    return outcome


def parse_line(raw: bytes, parse: Callable[[Mapping[str, Any]], Outcome]) -> Outcome | str:
    """One line of a result file as an outcome, or the reason it is none."""
    try:
        line = orjson.loads(raw)
    except ValueError:
        return "not JSON"
    if not isinstance(line, dict):
        return f"a JSON {type(line).__name__}, not an object"
    try:
        return checked(parse(line))
    except DATA_ERRORS as exc:
        return f"not a well-formed result ({type(exc).__name__}: {exc})"[:300]


_LINE_ID = re.compile(rb'"(?:custom_id|key)"\s*:\s*"([^"\\]{1,200})"')


def readable_id(raw: bytes) -> str | None:
    """The request id of a line that is no result, where one can be read (a line cut off keeps its start)."""
    try:
        line = orjson.loads(raw)
        return request_id(line) if isinstance(line, dict) else None
    except (ValueError, KeyError):
        found = _LINE_ID.search(raw)
        return found.group(1).decode("utf-8", "replace") if found else None


def stream_lines(
    fetch: Callable[[Path], None], folder: Path, name: str, parse: Callable[[Mapping[str, Any]], Outcome]
) -> Iterator[Outcome | BadLine]:
    """Download to a file first (a cut-off download raises and leaves nothing half-read), then parse it a line at a
    time as untrusted input: a line that is not a well-formed result (or longer than `MAX_LINE_BYTES`) is a `BadLine`
    and the download is then kept, with the keys nspec sent cut out, as ``folder/<name>.jsonl``; the other lines are
    read on."""
    folder.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", name).lstrip(".") or "download"  # a file name, whatever the id held
    part, kept = folder / f".{name}.part", folder / f"{name}.jsonl"
    bad = False
    try:
        fetch(part)
        with open(part, "rb") as fh:
            for number, (raw, whole) in enumerate(_lines(fh), 1):
                if not raw.strip():
                    continue
                parsed = parse_line(raw, parse) if whole else f"a line longer than {MAX_LINE_BYTES:,} bytes"
                if isinstance(parsed, Outcome):
                    yield parsed
                    continue
                bad = True
                yield BadLine(readable_id(raw), number, parsed, kept)
        if bad:
            _keep(part, kept)
    finally:
        part.unlink(missing_ok=True)


def _lines(fh: Any) -> Iterator[tuple[bytes, bool]]:
    """Each line of ``fh`` and whether it is whole: one longer than `MAX_LINE_BYTES` is cut there, its rest read
    past in pieces."""
    while line := fh.readline(MAX_LINE_BYTES):
        whole = len(line) < MAX_LINE_BYTES or line.endswith(b"\n")
        while not whole and (rest := fh.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
            pass
        yield line, whole


def _keep(part: Path, kept: Path) -> None:
    """A copy of a download with bad lines, for whoever wants to look: the keys nspec sent cut out (a gateway may
    echo them), each line at most `MAX_LINE_BYTES`."""
    with open(part, "rb") as src, open(kept, "wb") as out:
        for raw, whole in _lines(src):
            text = redact(raw.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
            out.write(text if whole else text + b"\n")
