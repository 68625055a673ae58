"""Services that speak OpenAI's API at an address of their own, each a provider by configuration: the
openai-compatible provider with the service's base URL, key variable, hosts and batch rules filled in, so that
`groq/<model>` needs no `base_url` and its key goes to the service only.

- `groq/<model>`: api.groq.com/openai/v1, GROQ_API_KEY. Batches as OpenAI's (the groq SDK's own types are
  OpenAI's), of `/v1/chat/completions` only, with a completion window from 24h to 7d (`batch_api: {completion_window:
  7d}`; console.groq.com/docs/batch). Batch is the default lane; `batch_api: false` runs live. Its list of models is
  asked before a run, as OpenAI's.
- `xai/<model>`: api.x.ai/v1, XAI_API_KEY, live through its OpenAI-compatible chat completions. xAI's own batch API
  is a gRPC service (the xai-sdk), which nspec does not speak: `batch_api: true` sends batches to its /v1/files and
  /v1/batches in OpenAI's format, as LiteLLM's docs describe them — not verified.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from nspec.runners.providers.openai import OpenAICompatible


class Hosted(OpenAICompatible):
    """An OpenAI-compatible service at a known address."""

    def __init__(
        self,
        name: str,
        base_url: str,
        key_variable: str,
        batch_by_default: bool,
        lists_models: bool,
        windows: tuple[int, int] | None = None,
    ) -> None:
        self.name = name
        self.official_base_url = base_url
        self.official_hosts = (urlsplit(base_url).hostname or "",)
        self.key_variables = (f"NSPEC_{key_variable}", key_variable)
        self.batch_by_default = batch_by_default
        self.optional_batch = not batch_by_default
        self.endpoints = ("chat",)
        self.windows = windows  # the completion windows it takes, in hours (None: unknown, not checked)
        self.lists_models = lists_models

    def model_issues(self, entry: Mapping[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
        issues = super().model_issues(entry)
        said = entry.get("batch_api")
        window = str(said.get("completion_window", "24h")) if isinstance(said, Mapping) else "24h"
        if self.windows is not None and _hours(window) not in range(self.windows[0], self.windows[1] + 1):
            low, high = self.windows
            issues.append(
                (("batch_api", "completion_window"), f"{self.name} takes a completion window of {low}h to {high}h")
            )
        return issues

    def has_batch(self, entry: Mapping[str, Any]) -> bool:
        said = entry.get("batch_api")
        return self.batch_by_default if said is None else said is not False


def _hours(window: str) -> int:
    """`24h` or `7d` in hours (the schema checked the form)."""
    return int(window[:-1]) * (24 if window.endswith("d") else 1)


# Groq's `GET /openai/v1/models` lists every id its API answers to (console.groq.com/docs/models).
GROQ = Hosted(
    "groq",
    "https://api.groq.com/openai/v1",
    "GROQ_API_KEY",
    batch_by_default=True,
    lists_models=True,
    windows=(24, 168),
)
# xAI's is not asked: its ids are dated (`grok-4-0709`) and it answers to aliases (`grok-4`, `grok-4-latest`) that the
# entries of its `GET /v1/models` do not promise to carry; a valid alias must not be refused.
XAI = Hosted("xai", "https://api.x.ai/v1", "XAI_API_KEY", batch_by_default=False, lists_models=False)
