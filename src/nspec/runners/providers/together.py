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
import json
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from nspec.compiler.providers.contract import as_sent, model_name
from nspec.compiler.providers.io import BadLine, BatchView, Credentials, Outcome, ShardLimits, provider_id
from nspec.errors import NspecError
from nspec.prompt import Prompt
from nspec.runners.providers import (
    ChatBodyLines,
    Clients,
    answer_json,
    chat_messages,
    connection_error,
    guard,
    live_outcome,
    request_failure,
    sdk,
    sdk_kwargs,
    sdk_retries,
    status_error,
    stream_lines,
)
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

    def shard_limits(self, entry: Mapping[str, Any]) -> ShardLimits:
        return ShardLimits(50_000, 100 * 1000 * 1000)  # docs.together.ai: 50,000 requests and 100 MB per batch

    def request_line(
        self,
        entry: Mapping[str, Any],
        custom_id: str,
        prompt: Prompt,
        params: Mapping[str, Any],
        max_tokens: int,
    ) -> dict[str, Any]:
        # Together's chat API does not say it continues a prefill: one goes at the end of the last user turn.
        messages = chat_messages(as_sent(self, entry, prompt))
        body: dict[str, Any] = {"model": model_name(entry), "messages": messages, "max_tokens": max_tokens}
        body.update({_RENAMED.get(k, k): v for k, v in params.items() if v is not None})
        return {"custom_id": custom_id, "body": body}

    def parse_result(self, line: Mapping[str, Any]) -> Outcome:
        return parse_result(line)

    def batches(self, creds: Credentials) -> TogetherBatches:
        return TogetherBatches(creds)

    def live(self, creds: Credentials, limits: Mapping[str, Any]) -> TogetherLive:
        return TogetherLive(creds)


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


class TogetherBatches:
    """Together's files and batch jobs."""

    finds_exactly = True  # by the file this folder uploaded

    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self.client = _client(creds, sdk_retries(), False)

    def _call(self, what: str, call: Callable[[], Any], objects: bool = True) -> Any:
        return guard("together", what, lambda exc: _error(self.creds, what, exc), call, objects)

    def upload(self, shard: Path) -> str:
        # The server validates the lines; the SDK's own check is for fine-tuning data.
        uploaded = self._call(
            "batch files", lambda: self.client.files.upload(file=shard, purpose="batch-api", check=False)
        )
        return str(self._call("batch files", lambda: provider_id(uploaded.id, "file id")))

    def create(self, file_id: str, shard: Path, metadata: dict[str, str]) -> str:
        with open(shard, "rb") as fh:
            model = str(json.loads(fh.readline())["body"]["model"])
        # Not retried by the SDK: a create whose answer was lost may have made a batch, which the runner finds again
        # (`find`) instead of paying for a second one.
        create = self.client.with_options(max_retries=0).batches.create
        return str(
            self._call(
                model, lambda: provider_id(create(input_file_id=file_id, endpoint=CHAT).job.id, "batch id"), False
            )
        )

    def find(self, metadata: dict[str, str], after: float) -> list[tuple[str, float]]:
        """Batches made from the shard's uploaded file after the recorded intent (less five minutes of clock skew),
        with their creation times: Together batches carry no metadata."""

        def call() -> list[tuple[str, float]]:
            found = []
            for job in self.client.batches.list():
                created = job.created_at.timestamp() if job.created_at else after
                if job.input_file_id == metadata.get("nspec_file") and created >= after - 300:
                    found.append((provider_id(job.id, "batch id"), created))
            return found

        return list(self._call("batches", call))

    def poll(self, batch_id: str) -> BatchView:
        def call() -> BatchView:
            job = self.client.batches.retrieve(batch_id)
            files = tuple(f for f in (job.output_file_id, job.error_file_id) if f)
            status = str(job.status or "VALIDATING")
            progress = job.progress if isinstance(job.progress, int | float) and 0 <= job.progress <= 100 else 0
            return BatchView(job.id, status, status in _ENDED, round(progress), 100, files)

        view: BatchView = self._call("batches", call)
        return view

    def failure(self, batch_id: str) -> str:
        def call() -> str:
            job = self.client.batches.retrieve(batch_id)
            return str(job.error or job.status)

        return str(self._call("batches", call))

    def download(self, view: BatchView, folder: Path) -> Iterator[Outcome | BadLine]:
        for file_id in view.output_files:
            yield from stream_lines(partial(self._fetch, file_id), folder, file_id, parse_result)

    def _fetch(self, file_id: str, dest: Path) -> None:
        def call() -> None:
            with self.client.files.with_streaming_response.content(file_id) as response:
                response.stream_to_file(dest)

        self._call("batch files", call)

    def cancel(self, batch_id: str) -> None:
        self._call("batches", lambda: self.client.batches.cancel(batch_id))


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
            mapped = _error(self.creds, str(body.get("model")), exc)
            if mapped is None:
                raise
            failed = request_failure(line["custom_id"], mapped)
            if failed is None:
                raise mapped from None
            return failed, None
        response = {"status_code": 200, "body": answer_json("together", raw)}
        result = {"custom_id": line["custom_id"], "response": response}
        return live_outcome("together", lambda: parse_result(result)), raw.headers

    async def close(self) -> None:
        await self.clients.close()


PROVIDER = Together()
