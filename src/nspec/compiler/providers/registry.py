"""The registry of providers: the `nspec.providers` entry-point group, each entry point named after the `provider/`
prefix of model ids and loading an object with the `Provider` interface, loaded on first use (a broken plugin only
matters to the specs that use it); and the listing `nspec providers` shows."""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Any

from nspec.errors import UserError
from nspec.plugins import Registry, named_itself

if TYPE_CHECKING:
    from nspec.compiler.providers.contract import Provider

GROUP = "nspec.providers"
PROVIDERS: Registry[Provider] = Registry(
    GROUP,
    "provider",
    "providers",
    named_itself,
    {"gemini": " (Gemini models are google/<model>)", "claude": " (Claude models are anthropic/<model>)"},
)


def provider(name: str) -> Provider:
    """The provider registered as ``name`` (the `provider/` prefix of a model id), loaded on first use."""
    return PROVIDERS.get(name)


def names() -> list[str]:
    """Every registered provider name."""
    return PROVIDERS.names()


def catalog() -> list[dict[str, Any]]:
    """Every registered provider as `nspec providers` shows it: how its models run, the variables its key is read
    from (and which is set; never the key), whether its SDK is installed, and how it counts tokens. A provider that
    fails to load is listed with its error."""
    rows: list[dict[str, Any]] = []
    for name in names():
        try:
            api = provider(name)
        except UserError as exc:
            rows.append({"provider": name, "error": str(exc)})
            continue
        found = next((v for v in api.key_variables if os.environ.get(v)), None)
        package = api.package
        rows.append(
            {
                "provider": name,
                "lanes": list(api.lanes),
                "key_variables": list(api.key_variables),
                "key_set": found,
                "sdk": package,
                "sdk_installed": package is None or importlib.util.find_spec(package) is not None,
                "install": None if package is None else api.install_hint,
                "token_counts": api.token_counts,
            }
        )
    return rows
