"""Mistral's API: `mistral/<model>`, through the `mistralai` SDK (``pip install 'needlespec[mistral]'``).

- Requests: JSONL lines ``{"custom_id", "body": {model, messages, max_tokens, ...}}`` — Mistral's batch file format
  (docs.mistral.ai/capabilities/batch); a live call sends the body to chat completions. A prefill is a final
  assistant message with `prefix: true`, which Mistral continues; its answer starts with the prefix (Mistral's
  prefix guide strips `len(prefix)` from the content) and is recorded as returned. A spec's parameters are Mistral's
  (`max_completion_tokens` is given as `max_tokens`, `seed` as `random_seed`); a name Mistral's chat completion
  request does not have is a `validate` error (the API answers it with 422).
- Batches: the file is uploaded (purpose `batch`), a job created on the model with the run's id, shard hash and
  attempt in its metadata (so an interrupted create is found again), polled until it ends (SUCCESS, FAILED,
  TIMEOUT_EXCEEDED, CANCELLED), and its output and error files downloaded: lines ``{"custom_id", "response":
  {"status_code", "body"}, "error"}`` as OpenAI's.
- Tokens: the o200k proxy with its margin (Mistral's own tokenizers ship offline only for its 2024 models).
- Errors: `mistralai`'s `MistralError` (status and body) and `NoResponseError`, mapped as for every provider; an
  unknown model is Mistral's 400 `invalid_model`, a refusal of the model as another provider's 404.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nspec.compiler.providers.io import BatchView, Credentials, Outcome, ShardLimits, counted
from nspec.errors import NspecError
from nspec.runners.providers import (
    ChatBodyLines,
    connection_error,
    guard,
    live_failure,
    live_outcome,
    sdk,
    sdk_retries,
    status_error,
)
from nspec.runners.providers.file_batches import FileBatches
from nspec.runners.providers.openai import parse_result as parse_openai_line

INSTALL_HINT = "pip install 'needlespec[mistral]'"
CHAT = "/v1/chat/completions"
# The fields of Mistral's chat completion request (docs.mistral.ai/api, "Chat Completion"; mistralai's
# ChatCompletionRequest): anything else is answered with 422 "Extra inputs are not permitted".
REQUEST_FIELDS = frozenset(
    (
        "model",
        "messages",
        "temperature",
        "top_p",
        "max_tokens",
        "stream",
        "stop",
        "random_seed",
        "metadata",
        "response_format",
        "tools",
        "tool_choice",
        "presence_penalty",
        "frequency_penalty",
        "min_tokens",
        "repetition_penalty",
        "top_k",
        "logprobs",
        "top_logprobs",
        "prompt_logprobs",
        "top_prompt_logprobs",
        "n",
        "prediction",
        "parallel_tool_calls",
        "reasoning_effort",
        "prompt_mode",
        "guardrails",
        "prompt_cache_key",
        "service_tier",
        "safe_prompt",
    )
)
_RENAMED = {"max_completion_tokens": "max_tokens", "seed": "random_seed"}
_ENDED = ("SUCCESS", "FAILED", "TIMEOUT_EXCEEDED", "CANCELLED")


def parse_result(line: Mapping[str, Any]) -> Outcome:
    """A line of a Mistral batch's output or error file (OpenAI's shape, `error` carrying `message` and `code`)."""
    return parse_openai_line(line)


class Mistral(ChatBodyLines):
    name = "mistral"
    request_format = "mistral"
    key_variables = ("NSPEC_MISTRAL_API_KEY", "MISTRAL_API_KEY")
    package = "mistralai.client"
    install_hint = INSTALL_HINT
    official_hosts: tuple[str, ...] = ("api.mistral.ai",)
    official_base_url: str | None = "https://api.mistral.ai"
    takes_headers = takes_query = False  # the SDK's client takes no default headers or query
    request_fields = REQUEST_FIELDS
    renamed = _RENAMED
    request_name = "Mistral's chat completion request"
    refusal = " (it answers 422)"
    prefill_fields: Mapping[str, Any] = {"prefix": True}  # a final assistant message with `prefix: true`

    def takes_prefill(self, entry: Mapping[str, Any]) -> bool:
        return True

    def shard_limits(self, entry: Mapping[str, Any]) -> ShardLimits:
        return ShardLimits(1_000_000, 512 * 1000 * 1000)  # docs.mistral.ai: up to 1M requests per job; files 512 MB

    def structured_output(self, params: Mapping[str, Any], name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        response_format = {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}
        return {"response_format": response_format, **params}

    def parse_result(self, line: Mapping[str, Any]) -> Outcome:
        return parse_result(line)

    def batches(self, creds: Credentials) -> MistralBatches:
        return MistralBatches(creds)

    def live(self, creds: Credentials, limits: Mapping[str, Any]) -> MistralLive:
        return MistralLive(creds)

    def model_names(self, creds: Credentials) -> frozenset[str] | None:
        """Mistral's `GET /v1/models`: each model card's id and its aliases (`mistral-large-latest` is one)."""

        def call() -> frozenset[str]:
            cards = _client(creds, sdk_retries()).models.list().data or []
            known = [card for card in cards if not getattr(card, "is_unknown", False)]  # a card of a type the SDK lacks
            return frozenset(name for card in known for name in (card.id, *(card.aliases or [])))

        return guard("mistral", "models", lambda exc: _error(creds, "", exc), call, objects=False)


def _client(creds: Credentials, retries: int) -> Any:
    client = sdk("mistralai.client", "mistral", INSTALL_HINT)
    utils = importlib.import_module("mistralai.client.utils")
    strategy = "backoff" if retries > 0 else "none"
    policy = utils.RetryConfig(strategy, utils.BackoffStrategy(500, 5000, 1.5, 30_000), retries > 0)
    return client.Mistral(api_key=creds.api_key, server_url=creds.base_url, retry_config=policy)


def _error(creds: Credentials, model: str, exc: BaseException) -> NspecError | None:
    """The SDK's exception as nspec's, or None when it is not the SDK's."""
    errors = importlib.import_module("mistralai.client.errors")
    if isinstance(exc, errors.MistralError):
        body = str(exc.body or exc.message)
        unknown = exc.status_code == 400 and '"invalid_model"' in body  # Mistral refuses a model with 400 (code 1500)
        return status_error("mistral", exc.status_code, body, creds, model, exc.headers, unknown)
    if isinstance(exc, errors.NoResponseError) or type(exc).__module__.startswith(("httpx", "httpcore")):
        return connection_error("mistral", exc)
    return None


class MistralBatches(FileBatches):
    """Mistral batch jobs over uploaded JSONL files."""

    files_endpoint = content_endpoint = "batch files"

    def __init__(self, creds: Credentials) -> None:
        super().__init__("mistral", creds)
        self.client = _client(creds, sdk_retries())
        self.creating = _client(creds, 0)

    def _error(self, model: str, exc: BaseException) -> NspecError | None:
        return _error(self.creds, model, exc)

    def parse_line(self, line: Mapping[str, Any]) -> Outcome:
        return parse_result(line)

    def _refused_as(self, line: Mapping[str, Any]) -> str:
        return str(line["body"]["model"])  # a job is created on its model, which Mistral checks then

    def _upload(self, shard: Path) -> Any:
        with open(shard, "rb") as fh:
            return self.client.files.upload(file={"file_name": shard.name, "content": fh}, purpose="batch")

    def _create(self, file_id: str, line: Mapping[str, Any], metadata: dict[str, str]) -> Any:
        model = str(line["body"]["model"])
        jobs = self.creating.batch.jobs
        return jobs.create(input_files=[file_id], model=model, endpoint=CHAT, metadata=metadata, timeout_hours=24)

    def _listed(self, after: float) -> Iterator[tuple[Any, float]]:
        listed = self.client.batch.jobs.list(page=0, page_size=100)
        return ((job, float(job.created_at)) for job in listed.data or [])

    def _get(self, batch_id: str) -> Any:
        return self.client.batch.jobs.get(job_id=batch_id)

    def _view(self, job: Any) -> BatchView:
        files = tuple(f for f in (job.output_file, job.error_file) if f)
        done = counted(job.succeeded_requests, job.failed_requests)
        return BatchView(job.id, str(job.status), job.status in _ENDED, done, counted(job.total_requests), files)

    def _failure(self, job: Any) -> str:
        return "; ".join(str(e.message) for e in job.errors or []) or str(job.status)

    def _download(self, file_id: str, dest: Path) -> None:
        response = self.client.files.download(file_id=file_id)
        with open(dest, "wb") as fh:
            for block in response.iter_bytes():
                fh.write(block)

    def _cancel(self, batch_id: str) -> None:
        self.client.batch.jobs.cancel(job_id=batch_id)


class MistralLive:
    """One model's live chat completions (the SDK's retries off: the runner retries)."""

    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self.client = _client(creds, 0)

    async def send(self, line: dict[str, Any]) -> tuple[Outcome, Mapping[str, str] | None]:
        body = line["body"]
        try:
            response = await self.client.chat.complete_async(**body)
        except Exception as exc:
            return live_failure(line["custom_id"], exc, _error(self.creds, str(body.get("model")), exc)), None
        completion = {"status_code": 200, "body": response.model_dump(mode="json")}
        result = {"custom_id": line["custom_id"], "response": completion}
        return live_outcome("mistral", lambda: parse_result(result)), None

    async def close(self) -> None:
        pass  # the SDK's client closes with the process


PROVIDER = Mistral()
