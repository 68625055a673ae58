"""Together AI: `together/<model>`, through the `together` SDK (``pip install 'needlespec[together]'``).

- Requests: JSONL lines ``{"custom_id", "body": {model, messages, max_tokens, ...}}`` — Together's batch file format
  (docs.together.ai/docs/inference/batch/tutorial), at most 50,000 lines and 100 MB per file; a live call sends the
  body to chat completions. Parameters are OpenAI's chat names (`max_completion_tokens` is given as `max_tokens`); a
  name Together's request lacks (`REQUEST_FIELDS`) is a `validate` error.
- Batches: the file is uploaded with purpose `batch-api` (the SDK's upload: a redirect to storage, then
  `preprocess`), a batch created on `/v1/chat/completions`, polled (VALIDATING, IN_PROGRESS, then COMPLETED,
  FAILED, EXPIRED or CANCELLED), and its output and error files downloaded. Together batches carry no metadata: an
  interrupted create is found again as the batch made after the recorded intent from the shard's uploaded file.
- Results: output lines as OpenAI's (``{"custom_id", "response": {"status_code"?, "body"}}``), error lines
  ``{"custom_id", "error"}``; a line of any other shape is recorded as an error, never as an answer.
- Tokens: the o200k proxy with its margin (Together's models use many tokenizers).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nspec.compiler.providers.io import BatchView, Credentials, Outcome, ShardLimits
from nspec.errors import NspecError
from nspec.runners.providers import (
    ChatBodyLines,
    Clients,
    answer_json,
    connection_error,
    guard,
    live_failure,
    live_outcome,
    sdk,
    sdk_kwargs,
    sdk_retries,
    status_error,
)
from nspec.runners.providers.file_batches import FileBatches, stream_content
from nspec.runners.providers.openai import parse_result as parse_openai_line
from nspec.runners.providers.pacing import http_client

INSTALL_HINT = "pip install 'needlespec[together]'"
CHAT = "/v1/chat/completions"
_ENDED = ("COMPLETED", "FAILED", "EXPIRED", "CANCELLED")
_RENAMED = {"max_completion_tokens": "max_tokens"}
# The parameters of Together's chat completions (the together SDK's CompletionCreateParams; docs.together.ai, "Create
# Chat Completion"), `stream` and the reasoning switch of hybrid models included.
REQUEST_FIELDS = frozenset(
    (
        "chat_template_kwargs",
        "compliance",
        "context_length_exceeded_behavior",
        "echo",
        "frequency_penalty",
        "function_call",
        "logit_bias",
        "logprobs",
        "max_tokens",
        "messages",
        "min_p",
        "model",
        "n",
        "presence_penalty",
        "reasoning",
        "reasoning_effort",
        "repetition_penalty",
        "response_format",
        "safety_model",
        "seed",
        "stop",
        "stream",
        "temperature",
        "tool_choice",
        "tools",
        "top_k",
        "top_p",
    )
)


def parse_result(line: Mapping[str, Any]) -> Outcome:
    """A line of a Together batch's output or error file: OpenAI's shape, the status code optional."""
    response = line.get("response")
    if isinstance(response, dict) and "status_code" not in response and isinstance(response.get("body"), dict):
        ok = isinstance(response["body"].get("choices"), list)
        line = {**line, "response": {**response, "status_code": 200 if ok else 500}}
    return parse_openai_line(line)


class Together(ChatBodyLines):
    name = "together"
    request_format = "together"
    key_variables = ("NSPEC_TOGETHER_API_KEY", "TOGETHER_API_KEY")
    package = "together"
    install_hint = INSTALL_HINT
    official_hosts: tuple[str, ...] = ("api.together.ai", "api.together.xyz")
    base_url_variable = "TOGETHER_BASE_URL"
    official_base_url: str | None = "https://api.together.ai"
    priced = False
    request_fields = REQUEST_FIELDS
    renamed = _RENAMED
    request_name = "Together's chat completions request"
    # It takes no prefill (the default): Together's chat API does not say it continues one, so a task family's answer
    # prefix goes at the end of the last user turn.

    def shard_limits(self, entry: Mapping[str, Any]) -> ShardLimits:
        return ShardLimits(50_000, 100 * 1000 * 1000)  # docs.together.ai: 50,000 requests and 100 MB per batch

    def parse_result(self, line: Mapping[str, Any]) -> Outcome:
        return parse_result(line)

    def batches(self, creds: Credentials) -> TogetherBatches:
        return TogetherBatches(creds)

    def live(self, creds: Credentials, limits: Mapping[str, Any]) -> TogetherLive:
        return TogetherLive(creds)

    def model_names(self, creds: Credentials) -> frozenset[str] | None:
        """Together's `GET /v1/models` (docs.together.ai/reference/models-1): a bare JSON array of models, not
        `{"data": [...]}`. The SDK has no method for it (its `models.list` lists a project's own uploads), so it is
        asked through the SDK's client, with its key, headers and errors."""

        def call() -> frozenset[str]:
            client = _client(creds, sdk_retries(), False)
            return frozenset(str(model["id"]) for model in client.get("/v1/models", cast_to=list[dict[str, Any]]))

        return guard("together", "models", lambda exc: _error(creds, "", exc), call, objects=False)


def _client(creds: Credentials, retries: int, is_async: bool) -> Any:
    together = sdk("together", "together", INSTALL_HINT)
    return (together.AsyncTogether if is_async else together.Together)(
        api_key=creds.api_key,
        base_url=creds.base_url,
        max_retries=retries,
        http_client=http_client(together, is_async),
        default_headers=dict(creds.headers),
        default_query=dict(creds.query),
    )


def _error(creds: Credentials, model: str, exc: BaseException) -> NspecError | None:
    """The SDK's exception as nspec's, or None when it is not the SDK's."""
    errors = importlib.import_module("together")
    if isinstance(exc, errors.APIStatusError):
        body = exc.body.get("error") if isinstance(exc.body, dict) else None
        message = str(body.get("message")) if isinstance(body, dict) and body.get("message") else str(exc.message)
        return status_error("together", exc.status_code, message, creds, model, exc.response.headers)
    if isinstance(exc, errors.APIConnectionError) or type(exc).__module__.startswith(("httpx", "httpcore")):
        return connection_error("together", exc)
    return None


class TogetherBatches(FileBatches):
    """Together's files and batch jobs. Its batches carry no metadata: a shard's are those made from the file this
    folder uploaded."""

    files_endpoint = content_endpoint = "batch files"

    def __init__(self, creds: Credentials) -> None:
        super().__init__("together", creds)
        self.client = _client(creds, sdk_retries(), False)

    def _error(self, model: str, exc: BaseException) -> NspecError | None:
        return _error(self.creds, model, exc)

    def parse_line(self, line: Mapping[str, Any]) -> Outcome:
        return parse_result(line)

    def _refused_as(self, line: Mapping[str, Any]) -> str:
        return str(line["body"]["model"])

    def _upload(self, shard: Path) -> Any:
        # The server validates the lines; the SDK's own check is for fine-tuning data.
        return self.client.files.upload(file=shard, purpose="batch-api", check=False)

    def _create(self, file_id: str, line: Mapping[str, Any], metadata: dict[str, str]) -> Any:
        return self.client.with_options(max_retries=0).batches.create(input_file_id=file_id, endpoint=CHAT).job

    def _listed(self, after: float) -> Iterator[tuple[Any, float]]:
        for job in self.client.batches.list():
            yield job, job.created_at.timestamp() if job.created_at else after

    def _made_from(self, job: Any, metadata: Mapping[str, str]) -> bool:
        return bool(job.input_file_id == metadata.get("nspec_file"))

    def _get(self, batch_id: str) -> Any:
        return self.client.batches.retrieve(batch_id)

    def _view(self, job: Any) -> BatchView:
        files = tuple(f for f in (job.output_file_id, job.error_file_id) if f)
        status = str(job.status or "VALIDATING")
        progress = job.progress if isinstance(job.progress, int | float) and 0 <= job.progress <= 100 else 0
        return BatchView(job.id, status, status in _ENDED, round(progress), 100, files)

    def _failure(self, job: Any) -> str:
        return str(job.error or job.status)

    def _download(self, file_id: str, dest: Path) -> None:
        stream_content(self.client, file_id, dest)

    def _cancel(self, batch_id: str) -> None:
        self.client.batches.cancel(batch_id)


class TogetherLive:
    """One model's live chat completions (an async client; the SDK's retries off: the runner retries)."""

    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self.clients = Clients(lambda: _client(creds, 0, True))

    async def send(self, line: dict[str, Any]) -> tuple[Outcome, Mapping[str, str] | None]:
        body = line["body"]
        try:
            async with self.clients.client() as client:
                kwargs = sdk_kwargs(client.chat.completions.create, body)
                raw = await client.chat.completions.with_raw_response.create(**kwargs)
        except Exception as exc:
            return live_failure(line["custom_id"], exc, _error(self.creds, str(body.get("model")), exc)), None
        response = {"status_code": 200, "body": answer_json("together", raw)}
        result = {"custom_id": line["custom_id"], "response": response}
        return live_outcome("together", lambda: parse_result(result)), raw.headers

    async def close(self) -> None:
        await self.clients.close()


PROVIDER = Together()
