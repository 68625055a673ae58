"""What requests cost, from the shipped price table (`prices.json`), overridable per model in the spec.

A price is per million tokens and per lane: `live` (list price), `batch` (the provider's batch discount) and `flex`
(OpenAI's flex tier). Prompt caching adds cache reads and writes (5-minute and 1-hour entries) at their own prices;
whether the batch discount applies to them (`batch_stacks`: yes on Anthropic) and whether cache hits are discounted
inside a batch at all (`batch_caching`: only GPT-5 and later on OpenAI) is per model. A long-context tier multiplies
the prices of a whole request whose input passes its threshold (OpenAI above 272K tokens, Claude Sonnet 4.5 above
200K). Every table entry says where its figures come from and when they were read.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

Lane = Literal["live", "batch", "flex"]
LANES: tuple[Lane, ...] = ("live", "batch", "flex")


@dataclass(frozen=True)
class Usage:
    """A request's tokens as billed. ``input_tokens`` counts every prompt token, cached or not; the cache fields
    say how many of them were read from the cache or written to it (for five minutes, or for an hour)."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0

    @property
    def uncached_tokens(self) -> int:
        return max(0, self.input_tokens - self.cache_read_tokens - self.cache_write_tokens - self.cache_write_1h_tokens)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.cache_write_1h_tokens + other.cache_write_1h_tokens,
        )

    @classmethod
    def of(cls, record: dict[str, Any]) -> Usage:
        """From a results.jsonl `usage` object (older runs have no cache fields)."""
        return cls(
            int(record.get("input_tokens", 0)),
            int(record.get("output_tokens", 0)),
            int(record.get("cache_read_tokens", 0)),
            int(record.get("cache_write_tokens", 0)),
            int(record.get("cache_write_1h_tokens", 0)),
        )


@dataclass(frozen=True)
class LongContext:
    """Above ``above`` input tokens, a whole request's input prices are multiplied by ``input`` and its output
    price by ``output``."""

    above: int
    input: float
    output: float


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cache_read: float | None = None  # None: cache hits are not discounted
    cache_write: float | None = None  # 5-minute entries; None: writing costs what input costs
    cache_write_1h: float | None = None
    batch_discount: float | None = None  # share of the live price a batch pays; None: no batch lane
    batch_caching: bool = True  # cache hits are discounted inside a batch
    batch_stacks: bool = True  # the batch discount applies to cache reads and writes as well
    flex_discount: float | None = None  # share of the live price the flex tier pays; None: no flex lane
    long_context: LongContext | None = None
    source: str | None = None
    as_of: str | None = None

    def has(self, lane: Lane) -> bool:
        return lane == "live" or (self.batch_discount if lane == "batch" else self.flex_discount) is not None

    def cost(self, usage: Usage, lane: Lane) -> float | None:
        """USD for one request (the long-context tier is decided per request) or, for sums of requests that all
        stay below the tier, for all of them; None when the lane has no known price."""
        scale = {"live": 1.0, "batch": self.batch_discount, "flex": self.flex_discount}[lane]
        if scale is None:
            return None
        tier_in, tier_out = 1.0, 1.0
        if self.long_context is not None and usage.input_tokens > self.long_context.above:
            tier_in, tier_out = self.long_context.input, self.long_context.output
        caching = lane != "batch" or self.batch_caching
        read = self.cache_read if caching and self.cache_read is not None else self.input
        write = self.cache_write if self.cache_write is not None else self.input
        write_1h = self.cache_write_1h if self.cache_write_1h is not None else write
        cache_scale = 1.0 if lane == "batch" and caching and not self.batch_stacks else scale
        cached = (
            usage.cache_read_tokens * read + usage.cache_write_tokens * write + usage.cache_write_1h_tokens * write_1h
        )
        input_usd = (usage.uncached_tokens * self.input * scale + cached * cache_scale) * tier_in
        return (input_usd + usage.output_tokens * self.output * scale * tier_out) / 1_000_000

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if v is not None and k != "long_context"}
        if self.long_context is not None:
            out["long_context"] = dict(self.long_context.__dict__)
        return out


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
    """The price of ``model_id`` from the table (see `table_entry`) with the spec's override on top (an override
    is its own source); None when the input or output price stays unknown."""
    entry = table_entry(model_id) or {}
    merged = {**entry, **(override or {})}
    if "input" not in merged or "output" not in merged:
        return None
    if override:
        merged["source"], merged["as_of"] = "the spec", None
    long_context = merged.pop("long_context", None)
    return Price(**merged, long_context=LongContext(**long_context) if long_context else None)
