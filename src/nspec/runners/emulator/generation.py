"""Answers to chat requests in both providers' formats, from the responder, with token usage."""

from __future__ import annotations

import json
import secrets
from typing import Any

from nspec.compiler.providers.contract import REASONING_TOKENS, message_text
from nspec.compiler.tokenizers import encoding
from nspec.runners.emulator.responders import Responder
from nspec.runners.providers.anthropic_models import thinking_tokens
from nspec.runners.providers.google import thinking
from nspec.runners.providers.openai_models import RESPONSES, reasoning_effort, requested_effort

DEFAULT_OPENAI_MAX_TOKENS = 4096


def count_tokens(text: str) -> int:
    return len(encoding("o200k_base").encode(text))


def _clip(text: str, max_tokens: int, counted_with: str = "o200k_base") -> tuple[str, bool]:
    """The longest start of ``text`` that counts at most ``max_tokens`` tokens in the encoding usage reports
    (`counted_with`), and whether it was cut: a cut between tokens can decode to text that counts more than the
    tokens it was cut from, so the start is counted again until it fits."""
    counter = encoding(counted_with)
    tokens = counter.encode(text)
    if len(tokens) <= max_tokens:
        return text, False
    keep = max(max_tokens, 0)
    while True:
        start = counter.encoding.decode(tokens[:keep])
        if keep == 0 or len(counter.encode(start)) <= max_tokens:
            return start, True
        keep -= 1


def _reasoned(allowance: int | None, share: float, limit: int) -> int:
    """The reasoning tokens an emulated model spends before it answers: ``share`` of what nspec allows its reasoning
    (`nspec.compiler.providers.contract.REASONING_TOKENS`; None: it does not reason), within the request's ``limit``."""
    return 0 if allowance is None or share <= 0 else min(limit, round(allowance * share))


def _prompt_tokens(system: str | None, messages: list[dict[str, Any]]) -> int:
    texts = [system] if system else []
    texts += [message_text(m.get("content")) for m in messages]
    return 3 + sum(4 + count_tokens(t) for t in texts)


def _structured(text: str, response_format: Any) -> str:
    """A reply shaped by a one-property json_schema response format, as a model with structured output gives it.
    A reply that fits no allowed value stands for a model that ran out of tokens inside the JSON (strict output
    never breaks the schema otherwise): the JSON is cut off."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return text
    props = response_format.get("json_schema", {}).get("schema", {}).get("properties", {})
    if len(props) != 1:
        return json.dumps({"text": text})
    ((name, schema),) = props.items()
    value: Any = text.strip()
    if schema.get("type") == "integer":
        digits = "".join(ch for ch in value if ch.isdigit())
        if not digits:
            return json.dumps({name: 0})[: len(name) + 5]
        value = int(digits)
    elif "enum" in schema and value not in schema["enum"]:
        return json.dumps({name: value})[: len(name) + 6]
    return json.dumps({name: value})


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def openai_completion(
    body: dict[str, Any], responder: Responder, key: str, created: int, reasoning_share: float = 0.0
) -> dict[str, Any]:
    """A chat.completion object for an OpenAI chat request body (validated by the caller). A reasoning model spends
    ``reasoning_share`` of its reasoning allowance first, within the limit (`_reasoned`)."""
    messages = body["messages"]
    system = "\n".join(message_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    turns = [m for m in messages if m.get("role") not in ("system", "developer")]
    limit = int(body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_OPENAI_MAX_TOKENS)
    effort = reasoning_effort(str(body.get("model", "")), body.get("reasoning_effort"))
    reasoned = _reasoned(REASONING_TOKENS.get(effort or ""), reasoning_share, limit)
    reply = responder.answer(system or None, turns, key, limit - reasoned, str(body.get("model", "")))
    structured = isinstance(body.get("response_format"), dict) and body["response_format"].get("type") == "json_schema"
    refusal = reply.text if reply.refused and structured else None
    shaped = "" if refusal else _structured(reply.text, body.get("response_format"))
    text, cut = _clip(refusal or shaped, limit - reasoned)
    refusal, text = (text, "") if refusal else (None, text)
    cut = cut or reasoned == limit or (structured and not refusal and not _is_json(text))
    prompt, completion = _prompt_tokens(None, messages), reasoned + count_tokens(refusal or text)
    return {
        "id": "chatcmpl-" + secrets.token_hex(12),
        "object": "chat.completion",
        "created": created,
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None if refusal else text,
                    "refusal": refusal,
                    "annotations": [],
                },
                "logprobs": None,
                "finish_reason": "length" if cut else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": reasoned,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": body.get("service_tier") or "default",
        "system_fingerprint": "fp_nspec_emulator",
    }


def _input_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses API request's `input` as chat messages (a string is one user message)."""
    given = body.get("input")
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    return [
        {"role": item.get("role", "user"), "content": _input_text(item.get("content"))}
        for item in given or []
        if isinstance(item, dict) and item.get("type", "message") == "message"
    ]


def _input_text(content: Any) -> str:
    if isinstance(content, list):  # [{"type": "input_text", "text": ...}]
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return message_text(content)


def openai_response(
    body: dict[str, Any], responder: Responder, key: str, created: int, reasoning_share: float = 0.0
) -> dict[str, Any]:
    """A Response object (the Responses API) for a request body (validated by the caller); a reasoning model
    reasons first, as in `openai_completion`."""
    messages = _input_messages(body)
    instructions = body.get("instructions") if isinstance(body.get("instructions"), str) else None
    system = "\n".join(
        [
            *([instructions] if instructions else []),
            *(m["content"] for m in messages if m["role"] in ("system", "developer")),
        ]
    )
    turns = [m for m in messages if m["role"] not in ("system", "developer")]
    limit = int(body.get("max_output_tokens") or DEFAULT_OPENAI_MAX_TOKENS)
    effort = reasoning_effort(str(body.get("model", "")), requested_effort(body, RESPONSES))
    reasoned = _reasoned(REASONING_TOKENS.get(effort or ""), reasoning_share, limit)
    reply = responder.answer(system or None, turns, key, limit - reasoned, str(body.get("model", "")))
    given = body.get("text")
    text_config: dict[str, Any] = given if isinstance(given, dict) else {}
    fmt = text_config.get("format") if isinstance(text_config.get("format"), dict) else None
    structured = fmt is not None and fmt.get("type") == "json_schema"
    response_format = {"type": "json_schema", "json_schema": fmt} if structured else None
    refusal = reply.text if reply.refused and structured else None
    shaped = "" if refusal else _structured(reply.text, response_format)
    text, cut = _clip(refusal or shaped, limit - reasoned)
    refusal, text = (text, "") if refusal else (None, text)
    cut = cut or reasoned == limit or (structured and not refusal and not _is_json(text))
    part: dict[str, Any] = (
        {"type": "refusal", "refusal": refusal} if refusal else {"type": "output_text", "text": text, "annotations": []}
    )
    prompt = _prompt_tokens(instructions, messages)
    completion = reasoned + count_tokens(refusal or text)
    return {
        "id": "resp_" + secrets.token_hex(12),
        "object": "response",
        "created_at": created,
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "model": body["model"],
        "instructions": instructions,
        "max_output_tokens": body.get("max_output_tokens"),
        "output": [
            {
                "type": "message",
                "id": "msg_" + secrets.token_hex(12),
                "status": "incomplete" if cut else "completed",
                "role": "assistant",
                "content": [part],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "reasoning": body.get("reasoning"),
        "text": {
            "format": fmt or {"type": "text"},
            **({"verbosity": text_config["verbosity"]} if "verbosity" in text_config else {}),
        },
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoned},
            "total_tokens": prompt + completion,
        },
        "service_tier": "default",
    }


def anthropic_message(
    body: dict[str, Any], responder: Responder, key: str, reasoning_share: float = 0.0
) -> dict[str, Any]:
    """A Message object for an Anthropic Messages request body (validated by the caller). A final assistant
    message is a prefill: the reply continues it and does not repeat it. A model that thinks spends
    ``reasoning_share`` of its thinking allowance first (counted in its output tokens; no thinking block is shown)."""
    messages = body["messages"]
    system = body.get("system")
    system_text = system if isinstance(system, str) else message_text(system) if system else None
    prefill = message_text(messages[-1].get("content")) if messages[-1].get("role") == "assistant" else None
    limit = int(body["max_tokens"])
    thinking = thinking_tokens(body)
    reasoned = _reasoned(None if thinking is None else thinking[1], reasoning_share, limit)
    reply = responder.answer(system_text, messages, key, limit - reasoned, str(body.get("model", "")))
    text = reply.text
    if prefill is not None and text.startswith(prefill):
        text = text[len(prefill) :]
    elif prefill is not None and not prefill.endswith(" ") and not text[:1].isspace():
        text = " " + text
    text, cut = _clip(text, limit - reasoned, "cl100k_base")
    cut = cut or reasoned == limit
    return {
        "id": "msg_" + secrets.token_hex(12),
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": [{"type": "text", "text": text, "citations": None}],
        "stop_reason": "max_tokens" if cut else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": anthropic_prompt_tokens(body),
            "output_tokens": reasoned + counted_tokens(text),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "service_tier": "batch" if key.startswith("batch:") else "standard",
        },
    }


def counted_tokens(text: str) -> int:
    """What the emulated Gemini and Claude count for a text: cl100k_base, on purpose not the o200k_base that nspec's
    proxy counts with, so that a test can tell an estimated length from a calibrated one."""
    return len(encoding("cl100k_base").encode(text))


def anthropic_prompt_tokens(body: dict[str, Any]) -> int:
    """A Messages request's input tokens, the same in usage and in count_tokens: its texts (cl100k, as
    `counted_tokens`), 4 per message and the system prompt, and 3 priming the reply."""
    system = body.get("system")
    texts = [system if isinstance(system, str) else message_text(system)] if system else []
    texts += [message_text(m.get("content")) for m in body["messages"]]
    return 3 + sum(4 + counted_tokens(t) for t in texts)


def google_prompt_tokens(request: dict[str, Any]) -> int:
    """A generateContent request's prompt tokens: its texts, and 3 per content (the same in countTokens)."""
    system = (request.get("systemInstruction") or {}).get("parts") or []
    contents = request.get("contents") or []
    texts = [p.get("text", "") for p in system] + [p.get("text", "") for c in contents for p in c.get("parts") or []]
    return sum(counted_tokens(t) for t in texts) + 3 * (len(contents) + (1 if system else 0))


def google_response(
    request: dict[str, Any], responder: Responder, key: str, reasoning_share: float = 0.0
) -> dict[str, Any]:
    """A GenerateContentResponse (REST JSON) for a generateContent request (validated by the caller). A model that
    thinks spends ``reasoning_share`` of its thinking allowance first (`thoughtsTokenCount`)."""
    system_parts = (request.get("systemInstruction") or {}).get("parts") or []
    system = "\n".join(p.get("text", "") for p in system_parts) or None
    turns = [
        {
            "role": "assistant" if c.get("role") == "model" else "user",
            "content": "".join(p.get("text", "") for p in c.get("parts") or []),
        }
        for c in request.get("contents") or []
    ]
    config = request.get("generationConfig") or {}
    limit = int(config.get("maxOutputTokens") or DEFAULT_OPENAI_MAX_TOKENS)
    model = str(request.get("model", "")).removeprefix("models/")
    thought = thinking(model, config.get("thinkingConfig") or {})
    reasoned = _reasoned(None if thought is None else thought[1], reasoning_share, limit)
    reply = responder.answer(system, turns, key, limit - reasoned, model)
    text = reply.text
    if config.get("responseMimeType") == "application/json" and isinstance(config.get("responseJsonSchema"), dict):
        text = _structured(text, {"type": "json_schema", "json_schema": {"schema": config["responseJsonSchema"]}})
    text, cut = _clip(text, limit - reasoned, "cl100k_base")
    cut = cut or reasoned == limit
    prompt, output = google_prompt_tokens(request), counted_tokens(text)
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": text}], "role": "model"},
                "finishReason": "MAX_TOKENS" if cut else "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": prompt,
            "candidatesTokenCount": output,
            "totalTokenCount": prompt + output + reasoned,
            **({"thoughtsTokenCount": reasoned} if reasoned else {}),
        },
        "modelVersion": str(request.get("model", "")).removeprefix("models/"),
        "responseId": secrets.token_hex(12),
    }


def mistral_completion(body: dict[str, Any], responder: Responder, key: str, created: int) -> dict[str, Any]:
    """A Mistral chat completion for a request body (validated by the caller). A final assistant message with
    `prefix: true` is continued, and the content starts with it (docs.mistral.ai: "prefix")."""
    messages = body["messages"]
    prefix = messages[-1] if messages[-1].get("role") == "assistant" and messages[-1].get("prefix") else None
    completion = openai_completion({**body, "messages": messages[:-1] if prefix else messages}, responder, key, created)
    choice = completion["choices"][0]
    text = choice["message"]["content"] or ""
    usage = dict(completion["usage"])
    if prefix is not None:  # the answer starts with the prefix, and counts it: still within the limit
        start = message_text(prefix.get("content"))
        limit = int(body.get("max_tokens") or DEFAULT_OPENAI_MAX_TOKENS)
        text, cut = _clip(text if text.startswith(start) else f"{start} {text}", limit)
        choice = {**choice, "finish_reason": "length" if cut else choice["finish_reason"]}
        usage["completion_tokens"] = count_tokens(text)
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return {
        "id": secrets.token_hex(16),
        "object": "chat.completion",
        "model": body["model"],
        "created": created,
        "usage": {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")},
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": None, "prefix": False},
                "finish_reason": choice["finish_reason"],
            }
        ],
    }


def together_completion(body: dict[str, Any], responder: Responder, key: str, created: int) -> dict[str, Any]:
    """A Together chat completion: OpenAI's, with the `prompt` list Together's response always carries."""
    completion = openai_completion(body, responder, key, created)
    choices = [
        {
            "index": c["index"],
            "message": {"role": "assistant", "content": c["message"]["content"]},
            "finish_reason": c["finish_reason"],
        }
        for c in completion["choices"]
    ]
    usage = completion["usage"]
    return {
        "id": secrets.token_hex(12),
        "object": "chat.completion",
        "created": created,
        "model": body["model"],
        "prompt": [],
        "choices": choices,
        "usage": {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")},
    }
