"""What Anthropic's Messages API accepts, by API version and model family: the one description that `nspec validate`
checks compiled requests against and that `nspec emulator` enforces (live and per batch line, by the request's
`anthropic-version` header), so that a rehearsal which passes means the real batch will not fail line by line.

nspec sends `API_VERSION` itself, on every call, whatever SDK is installed (`runners.providers.anthropic`): it is the
version the anthropic SDK 2.x sends (`anthropic/_constants.py`, ANTHROPIC_API_VERSION; a test checks they agree).

Sources (checked 2026-11): the SDK 2.x request type `MessageCreateParamsBase`, whose keys are `PARAMS` (a test compares
them); under 2026-10-21 any other key, `temperature`, `top_p` and `top_k` included, is a 400 "Extra inputs are not
permitted" on every model. Under 2023-06-01 the sampling parameters exist, but Claude Opus 4.7 and later (generation
5, Mythos, Fable) refuse them ("temperature is deprecated for this model"; Haiku takes them up to 4.5, Opus and
Sonnet up to 4.6), and older models take `temperature` only at 1, `top_p` only from 0.95 and no `top_k` while they
think (platform.claude.com, "Thinking": sampling parameters). Prefill: Claude 4.6 and later refuse a final assistant
message ("This model does not support assistant message prefill"), and every model refuses one ending in whitespace.
Thinking (the SDK's `ThinkingConfigParam`): `enabled` takes `budget_tokens` of at least 1,024 and less than
`max_tokens`, and is refused from Claude 4.7 on; `adaptive` exists from Claude 4.6 on; Mythos and Fable always think
(`disabled` is refused) and think adaptively when `thinking` is not set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nspec.compiler.providers.contract import REASONING_TOKENS

API_VERSION = "2026-10-21"  # what nspec sends (the anthropic SDK 2.x's default)
OLD_VERSION = "2023-06-01"  # the version before it, still answered
VERSIONS = (OLD_VERSION, API_VERSION)
# The keys of a Messages request under API_VERSION: MessageCreateParamsBase of the anthropic SDK 2.x, and `stream`.
PARAMS = frozenset(
    (
        "cache_control",
        "container",
        "diagnostics",
        "inference_geo",
        "max_tokens",
        "messages",
        "metadata",
        "model",
        "output_config",
        "service_tier",
        "speed",
        "stop_sequences",
        "stream",
        "system",
        "thinking",
        "tool_choice",
        "tools",
        "user_profile_id",
        "workspace_id",
    )
)
SAMPLING = ("temperature", "top_p", "top_k")  # gone in API_VERSION; in OLD_VERSION, for older models only
THINKING_MINIMUM = 1024  # the fewest budget_tokens `thinking: {type: enabled}` takes
_SNAPSHOT = re.compile(r"-\d{8}$")
_NEW_NAMES = re.compile(r"claude-(?:opus|sonnet|haiku)-(\d+)(?:-(\d)(?=$|-))?")  # claude-opus-4-7, claude-sonnet-5
_OLD_NAMES = re.compile(r"claude-(\d)(?:-(\d))?-(?:opus|sonnet|haiku)")  # claude-3-7-sonnet, claude-3-haiku


@dataclass(frozen=True)
class Family:
    """What one Claude model takes (the rules are by generation, so a family is its version)."""

    name: str
    generation: tuple[int, int]  # (4, 7) for claude-opus-4-7; models nspec cannot place count as the newest
    always_thinks: bool = False  # Mythos and Fable: `thinking: disabled` is refused; unset, they think adaptively

    @property
    def samples(self) -> bool:
        """Whether it takes temperature, top_p and top_k under OLD_VERSION."""
        return self.generation < (4, 7)

    @property
    def prefill(self) -> bool:
        return self.generation < (4, 6)

    def thinking_types(self) -> tuple[str, ...]:
        if self.always_thinks:
            return ("adaptive",)
        if self.generation < (4, 6):
            return ("enabled", "disabled")
        if self.generation < (4, 7):
            return ("adaptive", "enabled", "disabled")
        return ("adaptive", "disabled")


_NEWEST = (99, 0)


def family(model: str) -> Family:
    """The family of a Claude model id (a dated snapshot is its model's)."""
    name = _SNAPSHOT.sub("", model)
    if name.startswith(("claude-mythos", "claude-fable")):
        return Family(name, _NEWEST, always_thinks=True)
    for pattern in (_NEW_NAMES, _OLD_NAMES):
        found = pattern.match(name)
        if found:
            return Family(name, (int(found.group(1)), int(found.group(2) or 0)))
    return Family(name, _NEWEST)


@dataclass(frozen=True)
class Refusal:
    """One thing Anthropic refuses in a request (HTTP 400 invalid_request_error, or an errored batch line)."""

    param: str  # the request key it is about
    message: str  # as the API says it
    why: str  # what the rule is, for people


def thinking_type(params: Mapping[str, Any]) -> str | None:
    """The request's `thinking.type`, or None when it sets none."""
    thinking = params.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, Mapping) else None
    return kind if isinstance(kind, str) else None


def thinks(params: Mapping[str, Any]) -> bool:
    """Whether a request with these params has the model think."""
    kind = thinking_type(params)
    if kind is None:
        return family(str(params.get("model", ""))).always_thinks
    return kind != "disabled"


def thinking_tokens(params: Mapping[str, Any]) -> tuple[str, int] | None:
    """How a request with these params has the model think (in words) and the tokens to allow for it (the budget it
    sets, or `REASONING_TOKENS` at its effort), or None when it does not think."""
    if not thinks(params):
        return None
    budget = params["thinking"].get("budget_tokens") if thinking_type(params) == "enabled" else None
    if isinstance(budget, int):
        return f"with thinking budget_tokens {budget}", budget
    config = params.get("output_config")
    effort = config.get("effort") if isinstance(config, Mapping) else None
    said = f"adaptively at effort {effort}" if effort else "adaptively at effort high, its default"
    if thinking_type(params) is None:
        said += ", as it always does"
    return said, REASONING_TOKENS.get(str(effort or "high"), REASONING_TOKENS["high"])


def refusals(params: Mapping[str, Any], version: str = API_VERSION) -> list[Refusal]:
    """What Anthropic refuses in a Messages request (``params``: the body, or a batch request's `params`) sent with
    `anthropic-version: version`, in the order of the request's keys."""
    fam = family(str(params.get("model", "")))
    out: list[Refusal] = []
    thinking = thinks(params)
    for key, value in params.items():
        if key in SAMPLING and version == OLD_VERSION:
            out += _sampling(fam, key, value, thinking)
        elif key not in PARAMS:
            why = (
                f"Anthropic's API {API_VERSION} takes no sampling parameters (temperature, top_p, top_k) on any model"
                if key in SAMPLING
                else "not a parameter of Anthropic's Messages request"
            )
            out.append(Refusal(key, f"{key}: Extra inputs are not permitted", why))
    out += _thinking(fam, params)
    out += _prefill(fam, params, thinking)
    return out


def _sampling(fam: Family, key: str, value: Any, thinking: bool) -> list[Refusal]:
    if not fam.samples:
        why = "Claude Opus 4.7 and later take no sampling parameters"
        return [Refusal(key, f"{key} is deprecated for this model", why)]
    if not thinking:
        return []
    why = "while Claude thinks, temperature must be 1, top_p 0.95 to 1, and top_k unset"
    if key == "temperature" and value != 1:
        return [Refusal(key, "temperature may only be set to 1 when thinking is enabled", why)]
    if key == "top_k":
        return [Refusal(key, "top_k is not supported when thinking is enabled", why)]
    if key == "top_p" and not (isinstance(value, int | float) and 0.95 <= value <= 1):
        return [Refusal(key, "top_p must be between 0.95 and 1 when thinking is enabled", why)]
    return []


def _thinking(fam: Family, params: Mapping[str, Any]) -> list[Refusal]:
    kind = thinking_type(params)
    if kind is None:
        return []
    if kind not in fam.thinking_types():
        takes = " or ".join(f"`{t}`" for t in fam.thinking_types())
        hint = ' Use "thinking.type.adaptive" and "output_config.effort" to control thinking behavior.'
        return [
            Refusal(
                "thinking",
                f'"thinking.type.{kind}" is not supported for this model.' + (hint if kind == "enabled" else ""),
                f"{fam.name} takes thinking of type {takes}",
            )
        ]
    if kind != "enabled":
        return []
    budget = params["thinking"].get("budget_tokens")
    if not isinstance(budget, int) or budget < THINKING_MINIMUM:
        message = f"thinking.enabled.budget_tokens: Input should be greater than or equal to {THINKING_MINIMUM}"
        return [Refusal("thinking", message, f"budget_tokens is at least {THINKING_MINIMUM}")]
    limit = params.get("max_tokens")
    if isinstance(limit, int) and limit <= budget:
        message = "`max_tokens` must be greater than `thinking.budget_tokens`."
        return [Refusal("max_tokens", message, "thinking tokens count against max_tokens")]
    return []


def _prefill(fam: Family, params: Mapping[str, Any], thinking: bool) -> list[Refusal]:
    messages = params.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages and isinstance(messages[-1], Mapping) else None
    if last is None or last.get("role") != "assistant":
        return []
    if not fam.prefill:
        message = (
            "This model does not support assistant message prefill. The conversation must end with a user message."
        )
        return [Refusal("messages", message, "Claude 4.6 and later do not continue a prefill")]
    if thinking:
        message = "Prefilling the assistant turn is not supported when thinking is enabled."
        return [Refusal("messages", message, "a model that thinks does not continue a prefill")]
    content = last.get("content")
    text = content if isinstance(content, str) else "".join(_texts(content))
    if text[-1:].isspace():
        message = "messages: final assistant content cannot end with trailing whitespace"
        return [Refusal("messages", message, "a prefill may not end in whitespace")]
    return []


def _texts(content: Any) -> list[str]:
    if not isinstance(content, list):
        return []
    return [str(b.get("text", "")) for b in content if isinstance(b, Mapping)]
