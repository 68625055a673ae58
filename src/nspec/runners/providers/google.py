"""Google's Gemini API: `google/<model>`, through the `google-genai` SDK (``pip install 'needlespec[google]'``).

- Requests: JSONL lines ``{"key", "request": {model, contents, systemInstruction?, generationConfig}}`` — the
  Gemini batch file format; a live call sends the same request through `generateContent`. A spec's chat-style
  parameters are given in Gemini's names (`max_tokens` → `maxOutputTokens`, `top_p` → `topP`, `stop` →
  `stopSequences`, snake_case → camelCase); a name `generationConfig` does not have is a `validate` error. Gemini
  does not continue a final model turn: a spec's prefill is refused at `validate`, a task family's answer prefix
  goes at the end of the last user turn; assistant turns are `model` turns.
- Batches: the file is uploaded (resumable upload), a batch created on the model with the run's id, shard hash and
  attempt in its display name (so an interrupted create is found again), polled until its state ends, and its
  responses file downloaded: one line per request, `{"key", "response"}` or `{"key", "error"}`. Input files may be up
  to 2 GB. (Inline requests, which the API also takes below 20 MB, are not used: one path for every size.)
- Tokens: no exact offline tokenizer exists for Gemini: counts are the o200k proxy with its margin, unless the spec
  is calibrated (`nspec calibrate` asks `countTokens`).
- Errors: `google.genai.errors.APIError` by HTTP status, as for every provider.
"""

from __future__ import annotations

import importlib
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from nspec.compiler.providers.contract import REASONING_TOKENS, CacheStyle, Reasoning, as_sent, model_name
from nspec.compiler.providers.io import BadLine, BatchView, Credentials, Outcome, ShardLimits, provider_id
from nspec.errors import NspecError
from nspec.prompt import Prompt
from nspec.runners.providers import (
    BaseProvider,
    NotText,
    connection_error,
    guard,
    live_failure,
    live_outcome,
    not_text,
    sdk,
    sdk_retries,
    status_error,
    stream_lines,
)

INSTALL_HINT = "pip install 'needlespec[google]'"
# The fields of the API's GenerationConfig (ai.google.dev/api/generate-content#generationconfig).
GENERATION_FIELDS = frozenset(
    (
        "stopSequences",
        "responseMimeType",
        "responseSchema",
        "responseJsonSchema",
        "responseModalities",
        "candidateCount",
        "maxOutputTokens",
        "temperature",
        "topP",
        "topK",
        "seed",
        "presencePenalty",
        "frequencyPenalty",
        "responseLogprobs",
        "logprobs",
        "enableEnhancedCivicAnswers",
        "speechConfig",
        "thinkingConfig",
        "mediaResolution",
        "imageConfig",
    )
)
# Chat-style names a spec may use, in Gemini's words.
_RENAMED = {
    "max_tokens": "maxOutputTokens",
    "max_completion_tokens": "maxOutputTokens",
    "stop": "stopSequences",
}
# How Gemini models think (ai.google.dev/gemini-api/docs/thinking): 2.5 Pro always, with a thinkingBudget of 128 and
# more (-1, the default, is dynamic); 2.5 Flash by default (a budget of 0 turns it off); 2.5 Flash-Lite only when
# given a budget; Gemini 3 always, at a thinkingLevel (low or high, the default). Earlier models do not think.
_LEAST: dict[str, dict[str, Any]] = {
    "always": {"thinking_config": {"thinkingBudget": 128}},
    "default": {"thinking_config": {"thinkingBudget": 0}},
    "optional": {},
    "level": {"thinking_config": {"thinkingLevel": "low"}},
}


def thinking_kind(model: str) -> str | None:
    """How a Gemini model thinks (a key of `_LEAST`), or None when it does not."""
    found = re.match(r"gemini-(\d+)(?:\.(\d+))?-(pro|flash-lite|flash)", model)
    if found is None:
        return None
    version = (int(found.group(1)), int(found.group(2) or 0))
    if version >= (3, 0):
        return "level"
    if version < (2, 5):
        return None
    return {"pro": "always", "flash": "default", "flash-lite": "optional"}[found.group(3)]


def thinking(model: str, config: Mapping[str, Any]) -> tuple[str, int] | None:
    """How a Gemini model thinks with a thinkingConfig (in words), and the tokens to allow for it (the budget set, or
    `REASONING_TOKENS` at its level), or None when it does not think."""
    budget = config.get("thinkingBudget", config.get("thinking_budget"))
    level = config.get("thinkingLevel", config.get("thinking_level"))
    kind = thinking_kind(model)
    if kind is None or budget == 0 or (kind == "optional" and budget is None):
        return None  # flash-lite thinks only when given a budget
    if kind == "level":
        effort = str(level or "high").lower()
        tokens = REASONING_TOKENS.get(effort, REASONING_TOKENS["high"])
        return f"at thinkingLevel {effort}" + ("" if level else ", its default"), tokens
    if isinstance(budget, int) and budget > 0:
        return f"with thinkingBudget {budget}", budget
    return "with a dynamic thinking budget, its default", REASONING_TOKENS["medium"]


_ROLES = {"user": "user", "assistant": "model"}  # Gemini calls the model's turns `model`
_ENDED = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED")
_FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def generation_config(params: Mapping[str, Any], max_tokens: int) -> dict[str, Any]:
    """A spec's parameters as a GenerationConfig (REST names); a json_schema response_format (judges) as JSON
    output with that schema."""
    config: dict[str, Any] = {}
    for name, value in params.items():
        if value is None:
            continue  # null: leave it out
        if name == "response_format" and isinstance(value, Mapping) and value.get("type") == "json_schema":
            config["responseMimeType"] = "application/json"
            config["responseJsonSchema"] = value["json_schema"]["schema"]
            continue
        key = _RENAMED.get(name, camel(name))
        config[key] = [value] if key == "stopSequences" and isinstance(value, str) else value
    config.setdefault("maxOutputTokens", max_tokens)
    return config


def parse_result(line: Mapping[str, Any]) -> Outcome:
    """A line of a Gemini batch's responses file: a response, or an error (a status object)."""
    key = line["key"]
    error = line.get("error") or line.get("status")
    if error is not None:
        code = int(error.get("code") or 500)
        return Outcome(
            key,
            "error",
            retryable=code >= 500 or code == 429,
            error={"code": error.get("status") or str(code), "message": error.get("message")},
        )
    return response_outcome(key, line["response"])


def response_outcome(key: str, response: Mapping[str, Any]) -> Outcome:
    """A GenerateContentResponse (REST JSON) as an outcome: the first candidate's text; no candidate (the prompt was
    blocked) is an empty answer with the block reason as its finish reason. Thinking tokens are billed as output."""
    usage = response.get("usageMetadata") or {}
    output = int(usage.get("candidatesTokenCount") or 0) + int(usage.get("thoughtsTokenCount") or 0)
    prompt = int(usage.get("promptTokenCount") or 0)
    cached = int(usage.get("cachedContentTokenCount") or 0)  # of the prompt's tokens
    candidates = response.get("candidates") or []
    if not candidates:
        blocked = (response.get("promptFeedback") or {}).get("blockReason") or "no_candidate"
        return Outcome(key, "ok", "", f"prompt_blocked: {blocked}", prompt, output, cache_read_tokens=cached)
    candidate = candidates[0]
    parts = (candidate.get("content") or {}).get("parts") or []
    texts = [p.get("text", "") for p in parts if not p.get("thought")]
    if not all(isinstance(t, str) for t in texts):
        return not_text(key, NotText("a part of the answer has a text that is not text"))
    text = "".join(texts)
    reason = str(candidate.get("finishReason") or "STOP")
    return Outcome(key, "ok", text, _FINISH.get(reason, reason.lower()), prompt, output, cache_read_tokens=cached)


class Google(BaseProvider):
    name = "google"
    request_format = "google"
    key_variables = ("NSPEC_GEMINI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
    package = "google.genai"
    install_hint = INSTALL_HINT
    official_hosts: tuple[str, ...] = ("generativelanguage.googleapis.com",)
    official_base_url: str | None = "https://generativelanguage.googleapis.com"
    default_concurrency = 8
    counts_tokens = True
    takes_query = False  # google-genai's HttpOptions has headers, no query

    def cache_style(self, entry: Mapping[str, Any]) -> CacheStyle:
        # Gemini 2.5 and later cache prompt prefixes by themselves (implicit caching), from 1,024 tokens on Flash
        # models and 4,096 on the others (ai.google.dev/gemini-api/docs/caching).
        return CacheStyle("prefix", 1024 if "flash" in model_name(entry) else 4096)

    def refused_params(self, entry: Mapping[str, Any]) -> dict[str, str]:
        given = entry.get("params")
        params: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        out = {}
        for name in params:
            key = _RENAMED.get(name, camel(name))
            if name != "response_format" and key not in GENERATION_FIELDS:
                out[name] = f"Gemini's generationConfig has no field {key!r} (from `{name}`); it takes " + ", ".join(
                    sorted(GENERATION_FIELDS)
                )
        return out

    def reasoning(self, entry: Mapping[str, Any]) -> Reasoning | None:
        given = entry.get("params")
        params: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        config = next((v for k, v in params.items() if camel(k) == "thinkingConfig" and v is not None), None)
        model = model_name(entry)
        found = thinking(model, config if isinstance(config, Mapping) else {})
        kind = thinking_kind(model)
        return None if found is None or kind is None else Reasoning(found[0], found[1], _LEAST[kind])

    def shard_limits(self, entry: Mapping[str, Any]) -> ShardLimits:
        return ShardLimits(100_000, 2_000_000_000)

    def count_request(self, line: Mapping[str, Any]) -> dict[str, Any] | None:
        request = line["request"]
        return {"generateContentRequest": {k: v for k, v in request.items() if k != "generationConfig"}}

    def token_counter(self, creds: Credentials) -> GoogleCounter:
        return GoogleCounter(creds)

    def request_line(
        self,
        entry: Mapping[str, Any],
        custom_id: str,
        prompt: Prompt,
        params: Mapping[str, Any],
        max_tokens: int,
    ) -> dict[str, Any]:
        prompt = as_sent(self, entry, prompt)  # Gemini does not continue a final model turn: no prefill is left
        contents = [{"role": _ROLES[t.role], "parts": [{"text": t.text}]} for t in prompt.turns]
        request: dict[str, Any] = {"model": f"models/{model_name(entry)}", "contents": contents}
        if prompt.system is not None:
            request["systemInstruction"] = {"parts": [{"text": prompt.system}]}
        request["generationConfig"] = generation_config(params, max_tokens)
        return {"key": custom_id, "request": request}

    def request_size(self, line: Mapping[str, Any], count: Callable[[str], int]) -> int:
        return count(self.prompt_text(line)) + int(line["request"]["generationConfig"].get("maxOutputTokens") or 0)

    def structured_output(self, params: Mapping[str, Any], name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        return {"response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}, **params}

    def parse_result(self, line: Mapping[str, Any]) -> Outcome:
        return parse_result(line)

    def prompt_text(self, line: Mapping[str, Any]) -> str:
        request = line["request"]
        system = (request.get("systemInstruction") or {}).get("parts") or []
        turns = [part for content in request.get("contents") or [] for part in content.get("parts") or []]
        return "\n\n".join(p.get("text", "") for p in [*system, *turns])

    def batches(self, creds: Credentials) -> GoogleBatches:
        return GoogleBatches(creds)

    def live(self, creds: Credentials, limits: Mapping[str, Any]) -> GoogleLive:
        return GoogleLive(creds)

    def model_names(self, creds: Credentials) -> frozenset[str] | None:
        """Gemini's `GET models` (in the API version the SDK speaks), every page (its pager follows `nextPageToken`),
        its names (`models/gemini-2.5-pro`) without their prefix."""

        def call() -> frozenset[str]:
            client = _client(creds, sdk_retries() + 1)  # held while the pager reads: it closes with its client
            return frozenset(str(model.name).removeprefix("models/") for model in client.models.list() if model.name)

        return guard("google", "models", lambda exc: _error(creds, "", exc), call, objects=False)


def _client(creds: Credentials, attempts: int) -> Any:
    genai = sdk("google.genai", "google", INSTALL_HINT)
    types = importlib.import_module("google.genai.types")
    options = types.HttpOptions(
        base_url=creds.base_url,
        headers=dict(creds.headers),
        retry_options=types.HttpRetryOptions(attempts=max(1, attempts)),
    )
    return genai.Client(api_key=creds.api_key, http_options=options)


def retry_delay(body: Any) -> float | None:
    """Seconds to wait from a Google error's RetryInfo detail (`"retryDelay": "38s"`, a protobuf Duration), if any:
    Gemini says when to retry in the body, not in a header."""
    details = (body.get("error") or {}).get("details") if isinstance(body, dict) else None
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            match = re.fullmatch(r"(\d+(?:\.\d+)?)s", str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None


def _error(creds: Credentials, model: str, exc: BaseException) -> NspecError | None:
    """The SDK's exception as nspec's, or None when it is not the SDK's."""
    errors = importlib.import_module("google.genai.errors")
    if isinstance(exc, errors.APIError):
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        return _status_error(creds, model, int(exc.code or 500), exc.details, headers)
    if type(exc).__module__.startswith(("httpx", "httpcore")):
        return connection_error("google", exc)
    return None


def _status_error(
    creds: Credentials, model: str, code: int, body: Any, headers: Mapping[str, str] | None
) -> NspecError:
    """An error status with Google's error body (`{"error": {code, message, status, details}}`) as nspec's error."""
    error = body.get("error") if isinstance(body, dict) else None
    message = str(error.get("message")) if isinstance(error, dict) and error.get("message") else str(body)
    if code == 400 and "API key not valid" in message:
        code = 401  # Google answers a wrong key with 400 INVALID_ARGUMENT (reason API_KEY_INVALID)
    delay = retry_delay(body)
    if delay is not None:
        headers = {**(headers or {}), "retry-after-ms": str(round(delay * 1000))}
    return status_error("google", code, message, creds, model, headers)


def _display_name(metadata: Mapping[str, str]) -> str:
    """The batch's display name: Gemini batches carry no metadata, so the folder, run, shard and attempt go here."""
    said = (metadata.get("nspec_folder", ""), metadata["nspec_run"], metadata["nspec_shard"], metadata["nspec_attempt"])
    return "nspec " + " ".join(part for part in said if part)


class GoogleBatches:
    """Gemini batch jobs over uploaded JSONL files. Every call reads its answer inside `guard`, so an answer of the
    wrong shape is a `MalformedResponse` naming the endpoint."""

    finds_exactly = True  # by its display name, which this folder wrote

    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self.client = _client(creds, sdk_retries() + 1)
        # Creates are not retried by the SDK: one whose answer was lost may have made a batch, which the runner finds
        # again (`find`) instead of paying for a second one.
        self.creating = _client(creds, 1)
        self.types = importlib.import_module("google.genai.types")

    def _call(self, what: str, call: Callable[[], Any], objects: bool = True) -> Any:
        return guard("google", what, lambda exc: _error(self.creds, what, exc), call, objects)

    def upload(self, shard: Path) -> str:
        config = self.types.UploadFileConfig(mime_type="application/jsonl", display_name=shard.name)
        return str(
            self._call(
                "batch files",
                lambda: provider_id(self.client.files.upload(file=str(shard), config=config).name, "file id"),
            )
        )

    def create(self, file_id: str, shard: Path, metadata: dict[str, str]) -> str:
        with open(shard, "rb") as fh:
            model = str(json.loads(fh.readline())["request"]["model"]).removeprefix("models/")
        config = self.types.CreateBatchJobConfig(display_name=_display_name(metadata))
        create = self.creating.batches.create
        return str(
            self._call(
                model, lambda: provider_id(create(model=model, src=file_id, config=config).name, "batch id"), False
            )
        )

    def find(self, metadata: dict[str, str], after: float) -> list[tuple[str, float]]:
        """Batches whose display name carries this metadata, created after ``after`` (Unix seconds) less five minutes
        of clock skew, with their creation times."""
        wanted = _display_name(metadata)

        def call() -> list[tuple[str, float]]:
            found = []
            for job in self.client.batches.list(config={"page_size": 100}):
                created = job.create_time.timestamp() if job.create_time else after
                if job.display_name == wanted and created >= after - 300:
                    found.append((provider_id(job.name, "batch id"), created))
            return found

        return list(self._call("batches", call))

    def poll(self, batch_id: str) -> BatchView:
        def call() -> BatchView:
            job = self.client.batches.get(name=batch_id)
            state = job.state.name if job.state is not None else "JOB_STATE_PENDING"
            files = (job.dest.file_name,) if job.dest is not None and job.dest.file_name else ()
            return BatchView(batch_id, state, state in _ENDED, 0, 0, files)

        view: BatchView = self._call("batches", call)
        return view

    def failure(self, batch_id: str) -> str:
        def call() -> str:
            job = self.client.batches.get(name=batch_id)
            return str(job.error.message) if job.error is not None and job.error.message else str(job.state)

        return str(self._call("batches", call))

    def download(self, view: BatchView, folder: Path) -> Iterator[Outcome | BadLine]:
        for name in view.output_files:
            fetch = lambda dest, name=name: self._call(  # noqa: E731 - bound per file
                "batch files", lambda: self.client.files.download(file=name, destination=str(dest))
            )
            yield from stream_lines(fetch, folder, name, parse_result)

    def cancel(self, batch_id: str) -> None:
        self._call("batches", lambda: self.client.batches.cancel(name=batch_id))


class GoogleCounter:
    """Gemini's countTokens over plain HTTP (the standard library's): the SDK's `count_tokens` refuses a system
    instruction on the Gemini API (Vertex only), while the REST method counts a whole GenerateContentRequest
    (`generateContentRequest`)."""

    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self.base = (creds.base_url or "https://generativelanguage.googleapis.com").rstrip("/")

    def count(self, body: dict[str, Any]) -> int:
        model = str(body["generateContentRequest"]["model"]).removeprefix("models/")
        request = urllib.request.Request(
            f"{self.base}/v1beta/models/{model}:countTokens",
            data=json.dumps(body).encode(),
            headers={**self.creds.headers, "x-goog-api-key": self.creds.api_key, "content-type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return int(json.loads(response.read())["totalTokens"])
        except urllib.error.HTTPError as exc:
            try:
                answer = json.loads(exc.read())
            except ValueError:
                answer = {"error": {"message": f"status {exc.code}, not JSON"}}
            raise _status_error(self.creds, model, exc.code, answer, dict(exc.headers)) from None
        except (OSError, ValueError, KeyError) as exc:  # no connection, a cut-off or malformed answer
            raise connection_error("google", exc) from None


class GoogleLive:
    """One model's live `generateContent` calls (the SDK's retries off: the runner retries)."""

    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self.client = _client(creds, 1)
        self.types = importlib.import_module("google.genai.types")

    async def send(self, line: dict[str, Any]) -> tuple[Outcome, Mapping[str, str] | None]:
        request = line["request"]
        model = str(request["model"]).removeprefix("models/")
        settings = dict(request.get("generationConfig") or {})
        if "systemInstruction" in request:
            settings["systemInstruction"] = request["systemInstruction"]
        try:
            config = self.types.GenerateContentConfig.model_validate(settings)
            response = await self.client.aio.models.generate_content(
                model=model, contents=request["contents"], config=config
            )
        except Exception as exc:
            return live_failure(line["key"], exc, _error(self.creds, model, exc)), None
        body = response.model_dump(mode="json", by_alias=True, exclude_none=True)
        http = response.sdk_http_response
        outcome = live_outcome("google", lambda: response_outcome(line["key"], body))
        return outcome, (http.headers if http is not None else None)

    async def close(self) -> None:
        await self.client.aio.aclose()


PROVIDER = Google()
