"""What OpenAI's API accepts of each model family, as OpenAI documents and answers it: the one description that
`nspec validate` checks compiled requests against and that `nspec emulator` enforces, so that a rehearsal which
passes means the real batch will not fail line by line.

Sources (checked 2026-11): platform.openai.com/docs/guides/reasoning ("Limitations": reasoning models take
`max_completion_tokens`, not `max_tokens`, and only the default sampling settings); the API's own 400 answers, quoted
verbatim in the messages below (e.g. "Unsupported parameter: 'max_tokens' is not supported with this model. Use
'max_completion_tokens' instead.", code `unsupported_parameter`; "Unsupported value: 'temperature' does not support
0 with this model. Only the default (1) value is supported.", code `unsupported_value`); the reasoning-effort
reference (gpt-5.1 takes none, low, medium and high and defaults to none, where temperature, top_p and logprobs are
allowed; earlier gpt-5 models take minimal to high and default to medium; o-series models low to high); `verbosity`
is a gpt-5-family parameter. Models newer than these pages take the values the SDK's types allow. A key the endpoint's
request type does not have (`CHAT_PARAMS`, `RESPONSES_PARAMS`: the openai SDK's `CompletionCreateParams` and
`ResponseCreateParams`, which a test compares) is a 400 invalid_request_error "Unrecognized request argument
supplied: X" (no code).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
# Sampling settings a reasoning model takes only at their defaults (while it reasons).
_DEFAULTS = {"temperature": 1, "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0}
_REFUSED_WHILE_REASONING = ("logprobs", "top_logprobs", "logit_bias", "stop")
_SNAPSHOT = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")
# The keys of each endpoint's request: the openai SDK 3.x's CompletionCreateParams and ResponseCreateParams.
CHAT_PARAMS = frozenset(
    (
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "messages",
        "metadata",
        "modalities",
        "model",
        "moderation",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    )
)
RESPONSES_PARAMS = frozenset(
    (
        "access_programs",
        "background",
        "background_options",
        "context_management",
        "conversation",
        "image",
        "include",
        "input",
        "instructions",
        "max_output_tokens",
        "max_tool_calls",
        "metadata",
        "model",
        "moderation",
        "parallel_tool_calls",
        "previous_response_id",
        "prompt",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning",
        "safety_identifier",
        "service_tier",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "text",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "truncation",
        "user",
    )
)
ENDPOINT_PARAMS = {CHAT: CHAT_PARAMS, RESPONSES: RESPONSES_PARAMS}
# The models with a flex tier (platform.openai.com/docs/guides/flex-processing: "available for o3, o4-mini and gpt-5
# models"); a snapshot's name starts as its model's.
FLEX_MODELS = ("gpt-5", "o3", "o4-mini")


@dataclass(frozen=True)
class Family:
    name: str
    reasoning: bool = False  # takes reasoning_effort, refuses max_tokens and non-default sampling while reasoning
    efforts: tuple[str, ...] = ()
    default_effort: str | None = None
    verbosity: bool = False
    system: bool = True  # takes system (and developer) messages


_CHAT_MODEL = Family("chat")
_O_SERIES = Family("o-series", True, ("low", "medium", "high"), "medium")
_O1_EARLY = Family("o1-mini/o1-preview", True, (), None, system=False)
_GPT5 = Family("gpt-5", True, ("minimal", "low", "medium", "high"), "medium", verbosity=True)
_GPT5_PRO = Family("gpt-5-pro", True, ("high",), "high", verbosity=True)
_GPT51 = Family("gpt-5.1", True, ("none", "low", "medium", "high"), "none", verbosity=True)
_GPT5_LATER = Family(
    "gpt-5.2 and later", True, ("none", "minimal", "low", "medium", "high", "xhigh", "max"), "none", verbosity=True
)


def family(model: str) -> Family:
    """The family of an OpenAI model id (a dated snapshot is its model's)."""
    name = _SNAPSHOT.sub("", model)
    if "chat-latest" in name or name in ("gpt-5-chat", "chatgpt-4o-latest"):
        return _CHAT_MODEL
    if name in ("o1-mini", "o1-preview"):
        return _O1_EARLY
    if re.match(r"o\d", name):
        return _O_SERIES
    if name.startswith("gpt-5-pro"):
        return _GPT5_PRO
    if re.match(r"gpt-5\.1(\b|-)", name):
        return _GPT51
    if re.match(r"gpt-(5\.\d+|[6-9])", name):
        return _GPT5_LATER
    if name.startswith("gpt-5"):
        return _GPT5
    return _CHAT_MODEL


@dataclass(frozen=True)
class Refusal:
    """One thing OpenAI refuses in a request, as it says it (HTTP 400)."""

    param: str
    code: str | None  # unsupported_parameter | unsupported_value | None (an unrecognized argument)
    message: str


def _unsupported(param: str, hint: str = "") -> Refusal:
    return Refusal(
        param, "unsupported_parameter", f"Unsupported parameter: '{param}' is not supported with this model.{hint}"
    )


def unknown(body: Mapping[str, Any], endpoint: str) -> list[Refusal]:
    """The keys of ``body`` that ``endpoint``'s request does not have."""
    known = ENDPOINT_PARAMS[endpoint]
    return [Refusal(k, None, f"Unrecognized request argument supplied: {k}") for k in body if k not in known]


def refusals(body: Mapping[str, Any], endpoint: str, strict: bool = True) -> list[Refusal]:
    """What OpenAI refuses in a request ``body`` sent to ``endpoint`` (chat completions or responses); with
    ``strict`` false (a server of another kind, which takes its own extensions), keys unknown to OpenAI pass."""
    model = str(body.get("model", ""))
    fam = family(model)
    out: list[Refusal] = unknown(body, endpoint) if strict else []
    responses = endpoint == RESPONSES
    effort = requested_effort(body, endpoint)
    if responses:
        for param in ("max_tokens", "max_completion_tokens", "messages", "response_format", "reasoning_effort"):
            if param in body:
                out.append(_unsupported(param, " Use the Responses API's own parameters instead."))
        effort_param = "reasoning.effort"
        text = body.get("text")
        verbosity = text.get("verbosity") if isinstance(text, Mapping) else None
        verbosity_param = "text.verbosity"
    else:
        effort_param = "reasoning_effort"
        verbosity, verbosity_param = body.get("verbosity"), "verbosity"
        if fam.reasoning and "max_tokens" in body:
            out.append(_unsupported("max_tokens", " Use 'max_completion_tokens' instead."))
        if not fam.system and any(
            isinstance(m, Mapping) and m.get("role") in ("system", "developer") for m in body.get("messages") or []
        ):
            out.append(
                Refusal(
                    "messages",
                    "unsupported_value",
                    "Unsupported value: 'messages[0].role' does not support 'system' with this model.",
                )
            )
    if effort is not None:
        if not fam.efforts:
            out.append(_unsupported(effort_param))
        elif effort not in fam.efforts:
            allowed = ", ".join(f"'{e}'" for e in fam.efforts[:-1]) + f", and '{fam.efforts[-1]}'"
            if len(fam.efforts) == 1:
                allowed = f"'{fam.efforts[0]}'"
            out.append(
                Refusal(
                    effort_param,
                    "unsupported_value",
                    f"Unsupported value: '{effort}' is not supported with the '{model}' model. "
                    f"Supported values are: {allowed}.",
                )
            )
    if verbosity is not None and not fam.verbosity:
        out.append(_unsupported(verbosity_param))
    if body.get("service_tier") == "flex" and not model.startswith(FLEX_MODELS):
        out.append(
            Refusal(
                "service_tier",
                "unsupported_value",
                f"Unsupported value: 'service_tier' does not support 'flex' with the '{model}' model.",
            )
        )
    if reasons(fam, effort):
        for param, default in _DEFAULTS.items():
            value = body.get(param)
            if value is not None and value != default:
                out.append(
                    Refusal(
                        param,
                        "unsupported_value",
                        f"Unsupported value: '{param}' does not support {value} with this model. Only the default "
                        f"({default}) value is supported.",
                    )
                )
        for param in _REFUSED_WHILE_REASONING:
            if body.get(param) is not None:
                out.append(_unsupported(param))
    return out


def reasons(fam: Family, effort: Any) -> bool:
    """Whether a model of ``fam`` reasons at ``effort`` (None: its default)."""
    return fam.reasoning and (effort if effort is not None else fam.default_effort) != "none"


def reasoning_effort(model: str, effort: Any) -> str | None:
    """The effort ``model`` reasons at when asked for ``effort`` (None: its default; a family without efforts
    reasons at medium), or None when it does not reason."""
    fam = family(model)
    return str(effort or fam.default_effort or "medium") if reasons(fam, effort) else None


def requested_effort(body: Mapping[str, Any], endpoint: str) -> Any:
    """The reasoning effort a request ``body`` to ``endpoint`` asks for (None: the model's default)."""
    if endpoint != RESPONSES:
        return body.get("reasoning_effort")
    reasoning = body.get("reasoning")
    return reasoning.get("effort") if isinstance(reasoning, Mapping) else None


def rule(model: str, key: str, effort: Any, endpoint: str) -> str | None:
    """Why OpenAI may refuse the spec parameter ``key`` (in its chat name) for ``model`` at ``effort``, whatever its
    value; None when it takes it at every value its type allows."""
    fam = family(model)
    if key == "reasoning_effort":
        takes = ", ".join(fam.efforts)
        return f"{model} takes reasoning_effort {takes}" if takes else f"{model} takes no reasoning_effort"
    if key == "verbosity":
        return None if fam.verbosity else f"{model} takes no verbosity (a gpt-5-family parameter)"
    if key in ("max_tokens", "max_completion_tokens", "response_format"):
        return None  # given in the endpoint's own names
    if key not in ENDPOINT_PARAMS[endpoint]:
        return f"OpenAI's {'Responses' if endpoint == RESPONSES else 'chat completions'} request has no `{key}`"
    if reasons(fam, effort) and key in _DEFAULTS:
        return f"{model} takes {key} only at its default ({_DEFAULTS[key]}) while it reasons"
    if reasons(fam, effort) and key in _REFUSED_WHILE_REASONING:
        return f"{model} takes no {key} while it reasons"
    return None
