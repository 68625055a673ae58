"""Cost estimates from the shipped price table (`prices.json`), overridable per model in the spec."""

from __future__ import annotations

import difflib
import functools
import json
import re
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


# A dated snapshot of a listed model: claude-haiku-4-5-20251001, gpt-4.1-mini-2025-04-14.
_SNAPSHOT = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


def table_entry(model_id: str) -> dict[str, Any] | None:
    """The table's entry for ``model_id``: its own, a dated snapshot's model's, or its provider's listed family
    (`local/*`). Never a look-alike: `gpt-4.1-mni` is not `gpt-4.1`."""
    models: dict[str, dict[str, Any]] = price_table()["models"]
    if model_id in models:
        return models[model_id]
    undated = _SNAPSHOT.sub("", model_id)
    if undated != model_id and undated in models:
        return models[undated]
    return models.get(model_id.split("/", 1)[0] + "/*")


def close_names(model_id: str) -> list[str]:
    """Models of the table whose names are close to ``model_id`` (a misspelling, say)."""
    return difflib.get_close_matches(model_id, [k for k in price_table()["models"] if "*" not in k], n=2, cutoff=0.85)


def price_for(model_id: str, override: dict[str, Any] | None) -> Price | None:
    """The price of ``model_id`` from the table (see `table_entry`) with the spec's override on top; None when the
    input or output price stays unknown."""
    merged = {**(table_entry(model_id) or {}), **(override or {})}
    if "input" not in merged or "output" not in merged:
        return None
    return Price(merged["input"], merged["output"], merged.get("cached_input"), merged.get("batch_discount", 1.0))
