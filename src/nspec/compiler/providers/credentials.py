"""Where a model entry's requests go and the key they carry: its provider's address or its `base_url`, its key read
from the provider's variables or its `api_key_env`; a provider's standard key is sent only to the provider's own
hosts or to this machine."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from nspec import secrets
from nspec.compiler.providers.io import Credentials
from nspec.compiler.providers.registry import provider
from nspec.errors import AuthenticationFailed, UserError


@dataclass(frozen=True)
class Destination:
    """Where a model's requests go, and which environment variables its key is read from (the first set wins)."""

    model: str
    url: str | None  # None: nowhere, the model runs on this machine
    key_variables: tuple[str, ...]

    @property
    def host(self) -> str:
        if self.url is None:
            return "this machine"
        parsed = urlsplit(self.url)
        return parsed.netloc or self.url

    def __str__(self) -> str:
        key = " or ".join(self.key_variables) if self.key_variables else "no key"
        return f"{self.model} → {self.host} ({key})"


def destination(entry: Mapping[str, Any]) -> Destination:
    """Where the model entry's requests go and with which key."""
    api = provider(str(entry["id"]).split("/", 1)[0])
    url = entry.get("base_url") or api.default_base_url()
    own = api.entry_key_variables(entry)
    variables = (str(entry["api_key_env"]),) if "api_key_env" in entry else own
    return Destination(str(entry.get("name", entry["id"])), url, variables if own else ())


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, without port) is this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def key_destination_problem(entry: Mapping[str, Any]) -> str | None:
    """Why the model entry may not send its key where its `base_url` points (None if it may): a provider's standard
    key goes only to the provider's own hosts or to this machine; any other host needs `api_key_env` naming the key
    meant for it."""
    if "base_url" not in entry or "api_key_env" in entry:
        return None
    api = provider(str(entry["id"]).split("/", 1)[0])
    variables = api.entry_key_variables(entry)
    if not variables:
        return None
    host = urlsplit(str(entry["base_url"])).hostname or ""
    if is_official(host, api.official_hosts) or is_loopback(host):
        return None
    official = " or ".join(f"*{h}" if h.startswith(".") else h for h in api.official_hosts) or "its own API"
    return (
        f"base_url sends requests to {host}, which is not {api.name}'s API ({official}) nor this machine: the "
        f"standard key ({' or '.join(variables)}) is not sent there; name the key meant for {host} with "
        "api_key_env"
    )


def is_official(host: str, hosts: tuple[str, ...]) -> bool:
    """Whether ``host`` is one of ``hosts`` (a name starting with a dot stands for its subdomains, as
    `.openai.azure.com` for every Azure OpenAI resource)."""
    return any(host == h or (h.startswith(".") and host.endswith(h)) for h in hosts)


def credentials(entry: Mapping[str, Any]) -> Credentials:
    """The key, base URL, extra headers and query of a model entry (`api_key_env`, else its provider's variables);
    a missing key or header variable names what to set, before anything is sent. A standard key is never sent to a
    host that is neither the provider's nor this machine (`key_destination_problem`)."""
    name = str(entry["id"]).split("/", 1)[0]
    api = provider(name)
    label = str(entry.get("name", entry["id"]))
    headers = {}
    for header, value in (entry.get("headers") or {}).items():
        if isinstance(value, Mapping):
            if not os.environ.get(str(value["env"])):
                raise UserError(f"{label}: header {header} is read from {value['env']}, which is not set")
            value = os.environ[str(value["env"])]
            secrets.register(value)  # read from the environment: a secret, cut from every message kept
        headers[str(header)] = str(value)
    query = {str(k): str(v) for k, v in (entry.get("query") or {}).items()}
    base_url = entry.get("base_url") or api.default_base_url()
    variables = api.entry_key_variables(entry)
    if not variables:
        return Credentials("", base_url, None, headers, query, api.connection(entry))
    problem = key_destination_problem(entry)
    if problem is not None:
        raise UserError(f"{label}: {problem}")
    candidates = (str(entry["api_key_env"]),) if "api_key_env" in entry else variables
    found = next((n for n in candidates if os.environ.get(n)), None)
    if found is None:
        raise AuthenticationFailed(name, label, f"no API key for {label}: set {' or '.join(candidates)}")
    secrets.register(os.environ[found])
    return Credentials(os.environ[found], base_url, found, headers, query, api.connection(entry))
