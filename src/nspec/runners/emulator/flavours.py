"""The services the emulator serves in OpenAI's format, and how each differs from OpenAI's own where nspec can tell:
where its routes are, what its batch endpoints are called, which completion windows it takes, and which models it
runs (an Azure deployment runs the model it was created with).

- `openai` (`/v1`): OpenAI.
- `azure` (`/azure/openai`, as `AzureOpenAI(azure_endpoint=.../azure)` builds it): Azure OpenAI. Every call needs
  `api-version`; the key comes as `api-key`; chat completions go to `/deployments/{deployment}/chat/completions`;
  batch lines name `url: /chat/completions` (or `/responses`) and put the deployment in `body.model`
  (learn.microsoft.com/azure/ai-foundry/openai/how-to/batch); a file holds up to 100,000 requests and 200 MB; an
  unknown deployment is 404 `DeploymentNotFound`. Deployments are the config's `deployments` (name → model), and a
  deployment named as an OpenAI model runs that model.
- `groq` (`/groq/openai/v1`, Groq's OpenAI-compatible base URL): batches of `/v1/chat/completions` only, with a
  completion window from 24h to 7d (console.groq.com/docs/batch; the groq SDK's `BatchCreateParams`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from nspec.runners.emulator.config import EmulatorConfig
from nspec.runners.emulator.models import served
from nspec.runners.providers.openai_models import CHAT, RESPONSES


@dataclass(frozen=True)
class Flavour:
    name: str
    prefix: str
    endpoints: dict[str, str]  # a batch endpoint as the service names it → nspec's (CHAT or RESPONSES)
    window_ok: Callable[[str], bool]
    max_lines: Callable[[EmulatorConfig], int]
    model_of: Callable[[str, EmulatorConfig], str | None]  # the model a request names → the model that runs it
    deployment_paths: bool = False  # chat completions under /deployments/{model}/
    openai_types: bool = True  # whether it refuses keys OpenAI's request types lack ("Unrecognized request argument")

    @property
    def chat_path(self) -> str:
        """Where its chat completions are, under its prefix."""
        return "/deployments/{deployment}/chat/completions" if self.deployment_paths else "/chat/completions"

    def endpoint_of(self, url: str) -> str | None:
        return self.endpoints.get(url)

    def strict(self, runs: str, config: EmulatorConfig) -> bool:
        """Whether a request for the model ``runs`` is checked against OpenAI's request types: not for a model the
        config adds (an OpenAI-compatible server's, which takes its own extensions, as vLLM's
        `continue_final_message`), nor on a service whose own types are not known."""
        return self.openai_types and runs not in config.models


def _openai_model(model: str, config: EmulatorConfig) -> str | None:
    return model if served("openai", model, config.models) else None


def _azure_model(deployment: str, config: EmulatorConfig) -> str | None:
    if deployment in config.deployments:
        return config.deployments[deployment]
    return deployment if served("openai", deployment, config.models) else None


def _groq_model(model: str, config: EmulatorConfig) -> str | None:
    return model if served("groq", model, config.models) else None


def _groq_window(window: str) -> bool:
    """24h to 7d, in hours or days."""
    match = re.fullmatch(r"([1-9][0-9]*)([hd])", window)
    if match is None:
        return False
    hours = int(match.group(1)) * (24 if match.group(2) == "d" else 1)
    return 24 <= hours <= 7 * 24


OPENAI = Flavour(
    "openai",
    "/v1",
    {CHAT: CHAT, RESPONSES: RESPONSES},
    lambda window: window == "24h",
    lambda config: config.limits.openai_max_lines,
    _openai_model,
)
AZURE = Flavour(
    "azure",
    "/azure/openai",
    {"/chat/completions": CHAT, "/responses": RESPONSES},
    lambda window: window == "24h",
    lambda config: config.limits.azure_max_lines,
    _azure_model,
    deployment_paths=True,
)
GROQ = Flavour(
    "groq",
    "/groq/openai/v1",
    {CHAT: CHAT},
    _groq_window,
    lambda config: config.limits.openai_max_lines,
    _groq_model,
    openai_types=False,
)
FLAVOURS = {f.name: f for f in (OPENAI, AZURE, GROQ)}
