"""The models each emulated API has, and lists at its list endpoint. A request naming another is refused the way the
real API refuses it (OpenAI: 404 `model_not_found`; Anthropic: 404 `not_found_error`; ...), live and inside batches,
so a misspelt model fails the rehearsal rather than the overnight run; and a run, which asks the list first, refuses
it before anything is sent.

The names: for OpenAI and Anthropic, the models the provider's own SDK lists in its types (`openai.types.ChatModel`,
`anthropic.types.Model`), those nspec's price table lists, a few older ones still served, and the dated snapshots of
each (`claude-haiku-4-5-20251001`, `gpt-4.1-mini-2025-04-14`, served, not listed); for Gemini, Mistral, Together and
Groq, whose SDKs have no list of them, a selection of the models their own lists name (every name each serves is
listed, as theirs are); the config's `models` adds names (an OpenAI-compatible server's own) to every list."""

from __future__ import annotations

import functools
import re
import typing
from typing import Any

from nspec.compiler.prices import price_table

# Chat models the providers list that neither their SDK's types nor the price table name.
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
    # ai.google.dev/gemini-api/docs/models: stable names, previews, numbered versions and the `-latest` aliases.
    "google": (
        "gemini-3-pro-preview",
        "gemini-2.5-pro",
        "gemini-2.5-flash",
        "gemini-2.5-flash-lite",
        "gemini-2.5-flash-preview-09-2025",
        "gemini-2.5-flash-lite-preview-09-2025",
        "gemini-2.0-flash",
        "gemini-2.0-flash-001",
        "gemini-2.0-flash-lite",
        "gemini-2.0-flash-lite-001",
        "gemini-flash-latest",
        "gemini-flash-lite-latest",
    ),
    # docs.mistral.ai/getting-started/models: each family's versions (YYMM) and its `-latest` alias.
    "mistral": (
        *(f"mistral-large-{v}" for v in ("2407", "2411", "latest")),
        *(f"mistral-medium-{v}" for v in ("2505", "2508", "latest")),
        *(f"mistral-small-{v}" for v in ("2501", "2503", "2506", "latest")),
        *(f"magistral-{size}-{v}" for size in ("medium", "small") for v in ("2506", "2507", "2509", "latest")),
        *(f"ministral-{size}-{v}" for size in ("3b", "8b") for v in ("2410", "latest")),
        *(f"codestral-{v}" for v in ("2501", "2508", "latest")),
        *(f"devstral-small-{v}" for v in ("2505", "2507", "latest")),
        *(f"devstral-medium-{v}" for v in ("2507", "latest")),
        *(f"pixtral-large-{v}" for v in ("2411", "latest")),
        *(f"pixtral-12b-{v}" for v in ("2409", "latest")),
        *(f"mistral-saba-{v}" for v in ("2502", "latest")),
        "open-mistral-nemo",
        "open-mistral-nemo-2407",
        "open-mixtral-8x7b",
        "open-mixtral-8x22b",
    ),
    # Together's serverless chat models (api.together.ai/models), a selection.
    "together": (
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
    ),
    # Groq's production models (console.groq.com/docs/models).
    "groq": (
        "llama-3.1-8b-instant",
        "llama-3.3-70b-versatile",
        "meta-llama/llama-4-scout-17b-16e-instruct",
        "meta-llama/llama-4-maverick-17b-128e-instruct",
        "meta-llama/llama-guard-4-12b",
        "openai/gpt-oss-120b",
        "openai/gpt-oss-20b",
        "qwen/qwen3-32b",
        "moonshotai/kimi-k2-instruct-0905",
    ),
}
_SNAPSHOT = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")
_SNAPSHOTS = ("openai", "anthropic")  # the providers that serve a listed model's dated snapshots unlisted


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
    if provider == "anthropic":
        import anthropic.types

        return _literals(anthropic.types.Model)
    return []


@functools.cache
def _catalog(provider: str) -> frozenset[str]:
    priced = [name.split("/", 1)[1] for name in price_table()["models"] if name.startswith(provider + "/")]
    return frozenset((*priced, *_sdk_models(provider), *_MORE[provider]))


def served(provider: str, model: str, extra: list[str]) -> bool:
    """Whether the emulated ``provider`` (openai, anthropic, google, mistral, together or groq) serves ``model``."""
    if model in extra or model in _catalog(provider):
        return True
    return provider in _SNAPSHOTS and _SNAPSHOT.sub("", model) in _catalog(provider)


def listed(provider: str, extra: list[str]) -> list[str]:
    """The models the emulated ``provider`` lists: its catalog and the config's names (dated snapshots are served,
    not listed)."""
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
