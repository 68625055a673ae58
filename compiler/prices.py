"""Cost estimates from the shipped price table (`prices.json`), overridable per model in the spec."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cached_input: float | None
    batch_discount: float

    def cost(self, input_tokens: int, output_tokens: int, batch: bool) -> float:
        usd = (input_tokens * self.input + output_tokens * self.output) / 1_000_000
        return usd * self.batch_discount if batch else usd


@functools.cache
def price_table() -> dict[str, Any]:
    table: dict[str, Any] = json.loads(resources.files("nspec.compiler").joinpath("prices.json").read_text("utf-8"))
    return table


def price_for(model_id: str, override: dict[str, Any] | None) -> Price | None:
    """The price of ``model_id``: the table's entry (exact id, then a dated variant such as `...-20251001`, then
    `provider/*`) with the spec's override on top; None when the input or output price stays unknown."""
    models = price_table()["models"]
    base: dict[str, Any] = models.get(model_id) or {}
    if not base:
        prefixes = [k for k in models if model_id.startswith(k + "-")]
        wildcard = model_id.split("/", 1)[0] + "/*"
        base = models[max(prefixes, key=len)] if prefixes else models.get(wildcard, {})
    merged = {**base, **(override or {})}
    if "input" not in merged or "output" not in merged:
        return None
    return Price(merged["input"], merged["output"], merged.get("cached_input"), merged.get("batch_discount", 1.0))
