"""Providers: a registry from a model's `provider/` prefix to the code that talks to its API.

Each provider has pure hooks — turning a result line into a normalised `Outcome` — and I/O hooks — upload, create,
find again, poll, download, live call — so the runners hold the policy and the providers only the protocol.
SDKs are imported lazily; a missing package or key is a `UserError` naming the exact pip command or variable,
raised before anything is uploaded.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nspec.errors import UserError

# Environment variable overriding the SDKs' own retry count for control calls (tests set 0).
SDK_RETRIES_ENV = "NSPEC_SDK_MAX_RETRIES"


@dataclass(frozen=True)
class Outcome:
    """One request's result, normalised across providers."""

    custom_id: str
    status: str  # ok | error | expired | cancelled
    text: str | None = None
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    error: dict[str, Any] | None = None
    retryable: bool = True  # for errors: whether sending again may help

    def as_result(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "text": self.text,
            "finish_reason": self.finish_reason,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens},
            "error": self.error,
        }


@dataclass(frozen=True)
class BatchView:
    """A provider batch as last seen."""

    batch_id: str
    status: str  # the provider's own word
    ended: bool
    done: int  # requests finished (either way) as far as the provider says
    total: int
    output_files: tuple[str, ...] = ()  # OpenAI: output and error file ids


@dataclass(frozen=True)
class Credentials:
    api_key: str
    base_url: str | None


_KEY_VARS = {
    "openai": ("NSPEC_OPENAI_API_KEY", "OPENAI_API_KEY"),
    "openai-compatible": ("NSPEC_OPENAI_API_KEY", "OPENAI_API_KEY"),
    "anthropic": ("NSPEC_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"),
}
_PACKAGES = {"openai": "openai", "openai-compatible": "openai", "anthropic": "anthropic"}


def credentials(model: dict[str, Any]) -> Credentials:
    """The key and base URL of a model entry; a missing key names the variable to set."""
    provider = model["id"].split("/", 1)[0]
    if provider == "local":
        return Credentials("", None)  # the local engine needs no key
    names = (model["api_key_env"],) if "api_key_env" in model else _KEY_VARS[provider]
    key = next((os.environ[n] for n in names if os.environ.get(n)), None)
    if key is None:
        wanted = " or ".join(names)
        raise UserError(f"no API key for {model.get('name', model['id'])}: set {wanted}")
    return Credentials(key, model.get("base_url"))


def _sdk(provider: str) -> Any:
    package = _PACKAGES[provider]
    try:
        return __import__(package)
    except ImportError:
        raise UserError(f"the {package} package is needed for {provider} models: pip install {package}") from None


def _retries() -> int:
    return int(os.environ.get(SDK_RETRIES_ENV, "2"))


class OpenAIBatches:
    """OpenAI's (and OpenAI-compatible servers') files and batches."""

    def __init__(self, creds: Credentials) -> None:
        sdk = _sdk("openai")
        self.client = sdk.OpenAI(api_key=creds.api_key, base_url=creds.base_url, max_retries=_retries())

    def upload(self, path: Path) -> str:
        with open(path, "rb") as fh:
            return str(self.client.files.create(file=(path.name, fh), purpose="batch").id)

    def create(self, file_id: str, shard: Path, metadata: dict[str, str]) -> str:
        batch = self.client.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h", metadata=metadata
        )
        return str(batch.id)

    def find(self, metadata: dict[str, str], after: float) -> list[str]:
        """Batches carrying exactly this metadata (newest first), created after ``after`` (Unix seconds)."""
        found = []
        for batch in self.client.batches.list(limit=100):
            if batch.created_at < after - 300:  # listed newest first: older ones cannot be ours
                break
            if batch.metadata and all(batch.metadata.get(k) == v for k, v in metadata.items()):
                found.append(str(batch.id))
        return found

    def poll(self, batch_id: str) -> BatchView:
        b = self.client.batches.retrieve(batch_id)
        counts = b.request_counts
        done = (counts.completed + counts.failed) if counts else 0
        files = tuple(f for f in (b.output_file_id, b.error_file_id) if f)
        ended = b.status in ("completed", "failed", "expired", "cancelled")
        return BatchView(str(b.id), b.status, ended, done, counts.total if counts else 0, files)

    def failure(self, batch_id: str) -> str:
        b = self.client.batches.retrieve(batch_id)
        errors = b.errors.data if b.errors and b.errors.data else []
        return "; ".join(f"line {e.line}: {e.code}: {e.message}" for e in errors) or b.status

    def download(self, view: BatchView, folder: Path) -> Iterator[Outcome]:
        for file_id in view.output_files:
            yield from _stream_lines(lambda dest, f=file_id: self._fetch(f, dest), folder, file_id, parse_openai)

    def _fetch(self, file_id: str, dest: Path) -> None:
        self.client.files.content(file_id).write_to_file(dest)

    def cancel(self, batch_id: str) -> None:
        self.client.batches.cancel(batch_id)


class AnthropicBatches:
    """Anthropic's message batches."""

    def __init__(self, creds: Credentials) -> None:
        sdk = _sdk("anthropic")
        self.client = sdk.Anthropic(api_key=creds.api_key, base_url=creds.base_url, max_retries=_retries())

    def upload(self, path: Path) -> str:
        return ""  # nothing to upload: the shard's lines go into the create call

    def create(self, file_id: str, shard: Path, metadata: dict[str, str]) -> str:
        with open(shard, encoding="utf-8") as fh:
            requests = [json.loads(line) for line in fh if line.strip()]
        return str(self.client.messages.batches.create(requests=requests).id)

    def find(self, metadata: dict[str, str], after: float) -> list[str]:
        """Anthropic batches carry no metadata: candidates are batches created after the recorded intent (less a
        minute of clock skew) with the shard's request count, oldest first."""
        wanted = int(metadata["requests"])
        found = []
        for batch in self.client.messages.batches.list(limit=100):
            created = batch.created_at.timestamp()
            if created < after - 60:
                break
            c = batch.request_counts
            if c.processing + c.succeeded + c.errored + c.canceled + c.expired == wanted:
                found.append((created, str(batch.id)))
        return [batch_id for _, batch_id in sorted(found)]

    def poll(self, batch_id: str) -> BatchView:
        b = self.client.messages.batches.retrieve(batch_id)
        c = b.request_counts
        total = c.processing + c.succeeded + c.errored + c.canceled + c.expired
        return BatchView(str(b.id), b.processing_status, b.processing_status == "ended", total - c.processing, total)

    def failure(self, batch_id: str) -> str:
        return self.poll(batch_id).status

    def download(self, view: BatchView, folder: Path) -> Iterator[Outcome]:
        yield from _stream_lines(lambda dest: self._fetch(view.batch_id, dest), folder, view.batch_id, parse_anthropic)

    def _fetch(self, batch_id: str, dest: Path) -> None:
        with open(dest, "w", encoding="utf-8") as fh:
            for result in self.client.messages.batches.results(batch_id):
                fh.write(json.dumps(result.model_dump(mode="json")) + "\n")

    def cancel(self, batch_id: str) -> None:
        self.client.messages.batches.cancel(batch_id)


def _stream_lines(fetch: Any, folder: Path, name: str, parse: Any) -> Iterator[Outcome]:
    """Download to a file first (a cut-off download raises and leaves nothing half-read), then parse line by line."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{name}.", suffix=".part", delete=False) as tmp:
        part = Path(tmp.name)
    try:
        fetch(part)
        with open(part, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    yield parse(json.loads(line))
    finally:
        part.unlink(missing_ok=True)


def message_text(content: Any) -> str:
    """The text of a chat message's content (a string, or a list of text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def parse_openai(line: dict[str, Any]) -> Outcome:
    """A line of an OpenAI batch output or error file."""
    custom_id = line["custom_id"]
    error, response = line.get("error"), line.get("response")
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
    choice = body["choices"][0]
    usage = body.get("usage") or {}
    message = choice["message"]
    return Outcome(
        custom_id,
        "ok",
        message.get("content") or message.get("refusal") or "",  # a refusal under structured output has no content
        choice.get("finish_reason"),
        usage.get("prompt_tokens", 0),
        usage.get("completion_tokens", 0),
    )


def parse_anthropic(line: dict[str, Any]) -> Outcome:
    """A line of an Anthropic batch's results."""
    custom_id, result = line["custom_id"], line["result"]
    kind = result["type"]
    if kind == "succeeded":
        message = result["message"]
        text = "".join(b.get("text", "") for b in message["content"] if b.get("type") == "text")
        usage = message.get("usage") or {}
        return Outcome(
            custom_id,
            "ok",
            text,
            message.get("stop_reason"),
            usage.get("input_tokens", 0),
            usage.get("output_tokens", 0),
        )
    if kind == "errored":
        err = (result.get("error") or {}).get("error") or {}
        retryable = err.get("type") not in ("invalid_request_error", "authentication_error", "permission_error")
        return Outcome(
            custom_id, "error", retryable=retryable, error={"code": err.get("type"), "message": err.get("message")}
        )
    return Outcome(custom_id, "expired" if kind == "expired" else "cancelled", error={"code": kind, "message": None})


def transient(exc: BaseException) -> bool:
    """Whether a provider call failed in a way that trying again later may fix (connection, 408/409/429/5xx)."""
    import anthropic
    import openai

    if isinstance(exc, openai.APIConnectionError | anthropic.APIConnectionError):
        return True
    if isinstance(exc, openai.APIStatusError | anthropic.APIStatusError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return type(exc).__module__.startswith(("httpx", "httpcore"))  # a body cut off mid-download


def batch_client(provider: str, creds: Credentials) -> OpenAIBatches | AnthropicBatches:
    if provider == "anthropic":
        return AnthropicBatches(creds)
    if provider in ("openai", "openai-compatible"):
        return OpenAIBatches(creds)
    raise UserError(f"{provider} models have no batch API; use mode: live")
