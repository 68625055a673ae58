"""Azure OpenAI: `azure/<deployment>`, through the openai SDK's `AzureOpenAI` client.

- The model id names a deployment; `base_model` says which OpenAI model it runs (default: the deployment's name),
  which sets its tokenizer and the parameters it takes (OpenAI's rules, `openai_models`, checked by `validate`).
- The resource: `base_url` is its endpoint (`https://<resource>.openai.azure.com`), else AZURE_OPENAI_ENDPOINT as
  the SDK reads it; `api_version` the data-plane version (default `DEFAULT_API_VERSION`); the key is read from
  AZURE_OPENAI_API_KEY and sent (as `api-key`) only to Azure's hosts or to this machine.
- Requests: OpenAI's batch lines with `url: /chat/completions` (or `/responses`, `endpoint: responses`) and the
  deployment in `body.model`, as Azure's Global Batch takes them (learn.microsoft.com/azure/ai-foundry/openai/how-to/
  batch); a file holds up to 100,000 requests and 200 MB. Live chat completions go to the deployment's route.
- Batches: upload; wait until Azure has processed the file (it must be before a batch may use it); create with the
  run's metadata and a 24h window; poll, download and find again as OpenAI's.
- Price: Azure's depends on region and deployment type: unknown unless the entry sets `price`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nspec.compiler.providers.contract import model_name
from nspec.compiler.providers.io import Credentials, ShardLimits
from nspec.errors import ProviderError
from nspec.runners.providers import Clients, sdk, sdk_retries
from nspec.runners.providers.openai import ENDPOINTS, OpenAI, OpenAIBatches, OpenAILive
from nspec.runners.providers.pacing import http_client

DEFAULT_API_VERSION = "2025-04-01-preview"
# How Azure's batch lines name their endpoint: without OpenAI's /v1.
AZURE_URLS = {name: url.removeprefix("/v1") for name, url in ENDPOINTS.items()}
FILE_WAIT_SECONDS = 600  # an upload not processed by then is an error to retry later


class Azure(OpenAI):
    name = "azure"
    takes_cache_key = False  # Azure caches prompts as OpenAI does; its API documents no prompt_cache_key
    key_variables = ("NSPEC_AZURE_OPENAI_API_KEY", "AZURE_OPENAI_API_KEY")
    official_hosts: tuple[str, ...] = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")
    base_url_variable = "AZURE_OPENAI_ENDPOINT"
    official_base_url: str | None = None
    priced = False
    own_fields = ("api_version", "base_model")
    # Not asked: an azure id names a deployment, which its owner named. The data plane's `GET /openai/models` lists the
    # models a resource may deploy, not its deployments, and deployments are listed only by Azure's management API
    # (an Entra ID token for the subscription, not the resource's key): no free list says whether a deployment exists.
    # Its first request does (404 DeploymentNotFound).
    lists_models = False

    def base_model(self, entry: Mapping[str, Any]) -> str:
        return str(entry.get("base_model") or model_name(entry))

    def model_issues(self, entry: Mapping[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
        issues = super().model_issues(entry)
        if "base_url" not in entry and not os.environ.get(str(self.base_url_variable)):
            issues.append(
                (
                    (),
                    "an azure model needs `base_url`: its resource's endpoint (https://<resource>.openai.azure.com), "
                    f"or {self.base_url_variable} set",
                )
            )
        return issues

    def connection(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        return {"api_version": str(entry.get("api_version", DEFAULT_API_VERSION))}

    def shard_limits(self, entry: Mapping[str, Any]) -> ShardLimits:
        return ShardLimits(100_000, 200 * 1000 * 1000)

    def endpoint(self, entry: Mapping[str, Any]) -> str:
        return AZURE_URLS[str(entry.get("endpoint", "chat"))]

    def batches(self, creds: Credentials) -> AzureBatches:
        return AzureBatches(self.name, creds)

    def live(self, creds: Credentials, limits: Mapping[str, Any]) -> AzureLive:
        return AzureLive(self.name, creds)


def _azure_client(provider: str, creds: Credentials, retries: int, is_async: bool) -> Any:
    openai = sdk("openai", provider)
    return (openai.AsyncAzureOpenAI if is_async else openai.AzureOpenAI)(
        api_key=creds.api_key,
        azure_endpoint=creds.base_url,
        api_version=creds.options.get("api_version", DEFAULT_API_VERSION),
        max_retries=retries,
        http_client=http_client(openai, is_async),
        default_headers=dict(creds.headers),
        default_query=dict(creds.query),
    )


class AzureBatches(OpenAIBatches):
    """Azure's files and batches: OpenAI's, once an upload is processed."""

    def __init__(self, provider: str, creds: Credentials) -> None:
        self.provider, self.creds = provider, creds
        self.client = _azure_client(provider, creds, sdk_retries(), False)

    def upload(self, shard: Path) -> str:
        file_id = super().upload(shard)
        deadline, delay = time.monotonic() + FILE_WAIT_SECONDS, 0.2
        while True:
            status = str(self._call("files", lambda: self.client.files.retrieve(file_id).status))
            if status == "processed":
                return file_id
            if status == "error":
                raise ProviderError(self.provider, f"Azure could not process the uploaded {shard.name} ({file_id})")
            if time.monotonic() > deadline:
                raise ProviderError(self.provider, f"Azure has not processed {shard.name} ({file_id}) yet")
            time.sleep(delay)
            delay = min(5.0, delay * 2)


class AzureLive(OpenAILive):
    """A deployment's live calls (an async client; the SDK's retries off: the runner retries)."""

    def __init__(self, provider: str, creds: Credentials) -> None:
        self.provider, self.creds = provider, creds
        self.clients = Clients(lambda: _azure_client(provider, creds, 0, True))


PROVIDER = Azure()
