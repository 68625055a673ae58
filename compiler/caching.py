"""Cache-shaped compiling: which prefix of each request the provider is expected to have cached, and where a
request marks what to cache — decided by arithmetic, deterministically, as the cells are made.

A cache group is the cells of one model, trial and prompt variant whose prompt is the same up to the haystack and
whose haystack starts at the same token; cells are made in order of length and depth. Two provider styles:
- `prefix` (OpenAI, Gemini): every request's prefix is cached on its own, in steps of ``granularity`` tokens from
  ``minimum`` on, so two cells of a group share every token up to the earlier one's first needle; writing is free,
  so nothing is decided but the order, and a key that routes a group to the same cache.
- `breakpoints` (Anthropic): the request marks where an entry is written (`cache_control`), and a later request
  reads an entry only where its own blocks match the writer's, block by block. The questions asked of one context
  share it up to the question: the first marks the context, the others read it, when they are enough to repay the
  write (which costs 1.25 times plain input for five minutes, twice for an hour). Cells of different contexts are
  not shaped yet: that needs every cell of a group to split its haystack at the same points.

A random control arm (``control`` of the cells, drawn per cell from the seed) is sent with caching defeated: no
breakpoint, and for providers that cache by themselves a nonce at the very start of the prompt; each cell records
its arm, so that pass rates can be compared. What is predicted here is an estimate: a batch runs its requests in an
order of the provider's choosing, so hits are best-effort, and the usage the provider reports is what is billed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .draws import Draws
from .prices import price_for

if TYPE_CHECKING:
    from nspec.providers import Provider

Style = Literal["breakpoints", "prefix"]
TTLS = ("5m", "1h")


@dataclass(frozen=True)
class CacheStyle:
    """How a provider caches prompts for one model."""

    kind: Style
    minimum: int  # the fewest tokens a cached prefix holds (below it nothing is cached)
    granularity: int = 1  # cached prefixes grow in steps of this many tokens past the minimum
    key: bool = False  # the request can carry a cache key that routes a group to the same cache


@dataclass(frozen=True)
class CachePolicy:
    """Caching for one model's cells, as the spec and the provider settle it."""

    style: CacheStyle
    ttl: str  # 5m | 1h (breakpoints only)
    control: float  # share of cells sent with caching defeated
    reads_to_pay: int  # a written entry pays for itself once read this many times


@dataclass(frozen=True)
class CacheCut:
    """One cell's cache shape. Offsets are characters of the user message; 0 means none."""

    group: str  # the cell's cache group, also the key a `key` style sends
    control: bool
    boundaries: tuple[int, ...] = ()  # where the user message is split into blocks
    breakpoints: tuple[int, ...] = ()  # the block ends that carry a breakpoint (breakpoints style)
    ttl: str = "5m"
    read_tokens: int = 0  # expected to be read from the cache
    write_tokens: int = 0  # expected to be written to it (at ``ttl``)

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"group": self.group, "arm": "control" if self.control else "cached"}
        if not self.control:
            out.update(read_tokens=self.read_tokens, write_tokens=self.write_tokens)
            if self.write_tokens:
                out["ttl"] = self.ttl
        return out


def reads_to_pay(input_price: float, write_price: float, read_price: float) -> int:
    """The fewest reads r for which writing an entry once and reading it r times costs less than sending it
    uncached r + 1 times: w + r·h < 1 + r (prices relative to input)."""
    w, h = write_price / input_price, read_price / input_price
    if h >= 1:
        return 1_000_000_000  # reads are not cheaper: never pays
    r = 1
    while w + r * h >= 1 + r:
        r += 1
    return r


def cache_policy(top: Mapping[str, Any] | None, entry: Mapping[str, Any], api: Provider) -> CachePolicy | None:
    """The model's caching, from the spec's `cache` settings (the entry's over the top-level ones), its provider's
    style and its prices: None where caching is off, the provider has no style, or nothing is known to be saved
    (no cache price, or a batch whose cache hits are not discounted)."""
    settings = {**(top or {}), **(entry.get("cache") or {})}
    style = api.cache_style(entry)
    price = price_for(str(entry["id"]), entry.get("price"))
    if settings.get("mode", "auto") == "off" or style is None or price is None or price.cache_read is None:
        return None
    mode = api.mode(entry)
    if price.input <= 0 or (mode == "batch" and not price.batch_caching):
        return None
    ttl = str(settings.get("ttl", "auto"))
    if ttl == "auto":
        ttl = "1h" if mode == "batch" else "5m"
    write = (price.cache_write_1h if ttl == "1h" else None) or price.cache_write or price.input
    need = reads_to_pay(price.input, write, price.cache_read) if style.kind == "breakpoints" else 1
    return CachePolicy(style, ttl, float(settings.get("control", 0.05)), need)


def control_nonce(cell_id: str) -> str:
    """What starts a control cell's prompt where the provider caches by itself: a prefix no other request has."""
    return f"[{hashlib.sha256(cell_id.encode()).hexdigest()[:10]}]\n"


@dataclass
class _Group:
    longest: int = 0  # prefix: the longest shared prefix (tokens) an earlier request sent
    contexts: dict[str, int] = field(default_factory=dict)  # context digest → its tokens up to the question


class CachePlanner:
    """Decides each cell's cut, in compile order; holds per group what the cells before it left in the cache."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._groups: dict[str, _Group] = {}

    def is_control(self, policy: CachePolicy, cell_id: str) -> bool:
        return policy.control > 0 and Draws(self.seed, "cache-control", cell_id).uniform() < policy.control

    def cut(
        self,
        policy: CachePolicy,
        group: str,
        control: bool,
        needle: int,
        context: tuple[int, int, str],
        siblings_ahead: int,
    ) -> CacheCut:
        """The cut of one cell. ``needle`` is the tokens of the prompt before its first needle (the whole
        haystack for a cell with none); ``context`` is (characters, tokens, digest) of the prompt up to its
        question; ``siblings_ahead`` counts the questions still to come about this same context."""
        key = "nspec-" + hashlib.sha256(group.encode()).hexdigest()[:20]
        if control:
            return CacheCut(key, True)
        state = self._groups.setdefault(group, _Group())
        style = policy.style
        tokens = needle
        ctx_chars, ctx_tokens, digest = context
        if style.kind == "prefix":
            shared = min(tokens, state.longest)
            if digest in state.contexts:
                shared = max(shared, state.contexts[digest])
            state.longest = max(state.longest, tokens)
            state.contexts.setdefault(digest, ctx_tokens)
            read = 0 if shared < style.minimum else shared - (shared - style.minimum) % style.granularity
            return CacheCut(key, False, read_tokens=read)
        # breakpoints: the first question of a context marks it where enough questions follow to repay the write;
        # the others read it (their blocks are the same up to the question).
        if digest in state.contexts:
            return CacheCut(key, False, (ctx_chars,), (ctx_chars,), policy.ttl, ctx_tokens, 0)
        if siblings_ahead < policy.reads_to_pay or ctx_tokens < style.minimum:
            return CacheCut(key, False)
        state.contexts[digest] = ctx_tokens
        return CacheCut(key, False, (ctx_chars,), (ctx_chars,), policy.ttl, 0, ctx_tokens)
