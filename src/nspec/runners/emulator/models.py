"""The models each emulated API has. A request naming another is refused the way the real API refuses it (OpenAI: 404
`model_not_found`; Anthropic: 404 `not_found_error`), live and inside batches, so a misspelt model fails the
rehearsal rather than the overnight run.

The names: the models the provider's own SDK lists in its types (`openai.types.ChatModel`, `anthropic.types.Model`),
those nspec's price table lists, a few older ones still served, and the dated snapshots of each
(`claude-haiku-4-5-20251001`, `gpt-4.1-mini-2025-04-14`); the config's `models` adds names (an OpenAI-compatible
server's own)."""

from __future__ import annotations

import functools
import re
import typing
from typing import Any

from nspec.compiler.prices import price_table

# Chat models the providers still serve that neither their SDK's types nor the price table list.
_MORE = {
    "openai": ("o3-pro", "gpt-4.5-preview"),
    "anthropic": (
        "claude-opus-4-1",
        "claude-opus-4",
        "claude-sonnet-4",
        "claude-3-7-sonnet-latest",
        "claude-3-5-sonnet-latest",
        "claude-3-5-haiku-latest",
        "claude-3-haiku",
    ),
}
_SNAPSHOT = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


def _literals(kind: Any) -> list[str]:
    """The string literals inside a type (a Literal, or a Union holding one)."""
    args = typing.get_args(kind)
    if all(isinstance(a, str) for a in args):
        return list(args)
    return [name for arg in args for name in _literals(arg)]


def _sdk_models(provider: str) -> list[str]:
    if provider == "openai":
        import openai.types

        return _literals(openai.types.ChatModel)
    import anthropic.types

    return _literals(anthropic.types.Model)


@functools.cache
def _catalog(provider: str) -> frozenset[str]:
    listed = [name.split("/", 1)[1] for name in price_table()["models"] if name.startswith(provider + "/")]
    return frozenset((*listed, *_sdk_models(provider), *_MORE[provider]))


# Gemini's model names (ai.google.dev/gemini-api/docs/models): gemini-<version>-<pro|flash|flash-lite>, a stable
# name or a preview (`-preview`, `-preview-06-17`), or a numbered version (`-001`); the SDK has no list of them.
_GEMINI = re.compile(r"gemini-\d+(?:\.\d+)?-(?:pro|flash|flash-lite)(?:-preview(?:-\d\d-\d\d)?|-latest|-\d{3})?")
# Mistral's (docs.mistral.ai/getting-started/models): a family and a version date or `latest`.
_MISTRAL = re.compile(
    r"(?:mistral-(?:large|medium|small|tiny|saba)|magistral-(?:medium|small)|ministral-(?:3b|8b|14b)|codestral"
    r"|devstral-(?:small|medium)|pixtral-(?:large|12b)|open-mistral-nemo|open-mixtral-8x(?:7|22)b)"
    r"(?:-\d{4}|-latest)?"
)


# Together's serverless chat models (api.together.ai/models), a selection; the config's `models` adds others.
_TOGETHER = frozenset(
    (
        "meta-llama/Llama-3.3-70B-Instruct-Turbo",
        "meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo",
        "meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo",
        "meta-llama/Meta-Llama-3.1-405B-Instruct-Turbo",
        "meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8",
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-R1",
        "Qwen/Qwen2.5-72B-Instruct-Turbo",
        "Qwen/Qwen3-235B-A22B-Instruct-2507-tput",
        "openai/gpt-oss-120b",
        "openai/gpt-oss-20b",
        "moonshotai/Kimi-K2-Instruct",
    )
)


def served(provider: str, model: str, extra: list[str]) -> bool:
    """Whether the emulated ``provider`` (openai, anthropic, google, mistral or together) serves ``model``."""
    if model in extra:
        return True
    if provider == "google":
        return _GEMINI.fullmatch(model) is not None
    if provider == "mistral":
        return _MISTRAL.fullmatch(model) is not None
    if provider == "together":
        return model in _TOGETHER
    return _SNAPSHOT.sub("", model) in _catalog(provider) or model in _catalog(provider)


def listed(provider: str, extra: list[str]) -> list[str]:
    """The models the emulated ``provider`` (openai or anthropic) lists at `GET /v1/models`: its catalog and the
    config's names (dated snapshots are served, not listed)."""
    return sorted({*_catalog(provider), *extra})


def openai_refusal(model: str) -> dict[str, dict[str, Any]]:
    """OpenAI's error body for a model it does not have (status 404)."""
    message = f"The model `{model}` does not exist or you do not have access to it."
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": "model_not_found"}}


def anthropic_refusal(model: str) -> dict[str, str]:
    """Anthropic's error object for a model it does not have (status 404)."""
    return {"type": "not_found_error", "message": f"model: {model}"}


def google_refusal(model: str) -> str:
    """Gemini's message for a model it does not have (status 404 NOT_FOUND)."""
    return (
        f"models/{model} is not found for API version v1, or is not supported for generateContent. Call ListModels "
        "to see the list of available models and their supported methods."
    )
