"""Provider batch input lines, one per cell: exactly what is uploaded.

- OpenAI (and openai-compatible servers, and the local engine, which reads the same format as vLLM's run-batch):
  ``{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body": {model, messages, ...params}}``.
- Anthropic: ``{"custom_id", "params": {model, max_tokens, system?, messages, ...params}}``; the runner streams these
  into the create-batch call.
"""

from __future__ import annotations

import json
from typing import Any

OPENAI_URL = "/v1/chat/completions"
FORMATS = {"openai": "openai", "openai-compatible": "openai", "local": "openai", "anthropic": "anthropic"}
# Provider limits per batch input file (lines, bytes); the spec's run.shard may only lower them.
LIMITS = {"openai": (50_000, 200 * 1000 * 1000), "anthropic": (100_000, 256 * 1000 * 1000)}


def request_line(
    provider: str,
    model_name: str,
    custom_id: str,
    system: str | None,
    user: str,
    prefill: str | None,
    params: dict[str, Any],
    max_tokens: int,
) -> dict[str, Any]:
    """The batch input line of one request."""
    if FORMATS[provider] == "anthropic":
        body: dict[str, Any] = {"model": model_name, "max_tokens": max_tokens}
        if system is not None:
            body["system"] = system
        messages = [{"role": "user", "content": user}]
        if prefill is not None:
            messages.append({"role": "assistant", "content": prefill})
        body["messages"] = messages
        body.update({k: v for k, v in params.items() if k != "max_tokens"})
        return {"custom_id": custom_id, "params": body}
    messages = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": user})
    if prefill is not None:
        messages.append({"role": "assistant", "content": prefill})
    body = {"model": model_name, "messages": messages}
    # OpenAI's own API takes max_completion_tokens (max_tokens is refused by its reasoning models); servers that
    # speak its format (vLLM, llama.cpp) take max_tokens.
    limit_key = "max_completion_tokens" if provider == "openai" else "max_tokens"
    if "max_tokens" not in params and "max_completion_tokens" not in params:
        body[limit_key] = max_tokens
    body.update(params)
    return {"custom_id": custom_id, "method": "POST", "url": OPENAI_URL, "body": body}


def encode_line(line: dict[str, Any]) -> bytes:
    """One JSONL line, byte-for-byte stable."""
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
