"""Cache-shaped compiling: which prefix of each request the provider is expected to have cached, and where a
request marks what to cache — decided by arithmetic, deterministically, as the cells are made.

Cells of one model, trial and prompt variant share their haystack from its first token, so two of them share every
byte up to the earlier one's first needle (the `pre-needle` cut); the questions asked of one context share it up to
the question (the `context` cut). Cells are made in order of length and depth, so each cell can read the longest
prefix an earlier cell of its group left in the cache and leave its own for the cells after it.

Two provider styles:
- `breakpoints` (Anthropic): the request marks where an entry is written (`cache_control`); a later request reads
  an entry only at one of its own block boundaries. A write costs more than plain input (1.25 times for five
  minutes, twice for an hour), so a breakpoint is set only where the cells still to come will read it often
  enough to repay it.
- `prefix` (OpenAI, Gemini): every request's prefix is cached on its own, in steps of ``granularity`` tokens from
  ``minimum`` on; writing is free, so nothing is decided but the order, and a key that keeps a group together.

A random control arm (``control`` of the cells, drawn per cell from the seed) is sent with caching defeated: no
breakpoint, and for providers that cache by themselves a nonce at the very start of the prompt; the report compares
its pass rate with the cached cells'. What is predicted here is an estimate: a batch runs its requests in an order
of the provider's choosing, so hits are best-effort, and the usage the provider reports is what is billed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
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


class ReadsAhead:
    """For the cells of one group in compile order (per length, each depth's cells, then the negative controls):
    how many cells after a given one have their first needle no earlier, estimated as depth times length (a negative
    control's whole haystack as its length). The estimate decides whether writing an entry will pay."""

    def __init__(self, lengths: Sequence[int], depths: Sequence[float], per_depth: int, negatives: int) -> None:
        places: list[tuple[float, int]] = []
        for length in lengths:
            places += [(depth / 100 * length, per_depth) for depth in depths]
            if negatives:
                places.append((float(length), negatives))
        self.width = len(depths) + (1 if negatives else 0)
        ranks = {p: i for i, p in enumerate(sorted({p for p, _ in places}))}
        tree = [0] * (len(ranks) + 1)  # a Fenwick tree of cells seen so far (from the end), by position rank
        self._after = [0] * len(places)
        seen = 0
        for i in range(len(places) - 1, -1, -1):
            position, count = places[i]
            k, below = ranks[position], 0
            while k > 0:  # cells after this place that lie strictly earlier
                below += tree[k]
                k -= k & -k
            self._after[i] = seen - below
            k = ranks[position] + 1
            while k < len(tree):
                tree[k] += count
                k += k & -k
            seen += count

    def place(self, length_index: int, depth_index: int | None) -> int:
        """A cell's place: its length's and depth's (None: a negative control)."""
        return length_index * self.width + (self.width - 1 if depth_index is None else depth_index)

    def __call__(self, place: int, within: int) -> int:
        """Cells after the ``place``'s, plus ``within``: the cells of its own place still to come."""
        return self._after[place] + within


def control_nonce(cell_id: str) -> str:
    """What starts a control cell's prompt where the provider caches by itself: a prefix no other request has."""
    return f"[{hashlib.sha256(cell_id.encode()).hexdigest()[:10]}]\n"


@dataclass
class _Group:
    written: list[int] = field(default_factory=list)  # breakpoints: tokens of each entry written, sorted
    chars: dict[int, int] = field(default_factory=dict)  # an entry's tokens → where it ends in the user message
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
        needle: tuple[int, int],
        context: tuple[int, int, str],
        reads_ahead: int,
        siblings_ahead: int,
    ) -> CacheCut:
        """The cut of one cell. ``needle`` is (characters, tokens) of the prompt before its first needle (the
        whole haystack for a cell with none); ``context`` is (characters, tokens, digest) of the prompt up to its
        question; ``reads_ahead`` counts the cells still to come in the group whose first needle lies no earlier;
        ``siblings_ahead`` the questions still to come about this same context."""
        key = "nspec-" + hashlib.sha256(group.encode()).hexdigest()[:20]
        if control:
            return CacheCut(key, True)
        state = self._groups.setdefault(group, _Group())
        style = policy.style
        tokens = needle[1]
        ctx_chars, ctx_tokens, digest = context
        if style.kind == "prefix":
            shared = min(tokens, state.longest)
            if digest in state.contexts:
                shared = max(shared, state.contexts[digest])
            state.longest = max(state.longest, tokens)
            state.contexts.setdefault(digest, ctx_tokens)
            read = 0 if shared < style.minimum else shared - (shared - style.minimum) % style.granularity
            return CacheCut(key, False, read_tokens=read)
        # breakpoints: a sibling question wrote the whole context: read it. Anthropic matches a prefix block by
        # block, so a cut before the needle would pay only if every cell of the group split its haystack at the same
        # points; until a shared ladder of cut points does that, only the context cut is made (its blocks are the
        # same in every question of the context).
        if state.contexts.get(digest) is not None:
            return CacheCut(key, False, (ctx_chars,), (ctx_chars,), policy.ttl, ctx_tokens, 0)
        last = 0
        boundaries: dict[int, int] = {}
        marks: list[int] = []
        if siblings_ahead >= policy.reads_to_pay and ctx_tokens >= style.minimum and ctx_tokens > last:
            boundaries[ctx_chars] = ctx_tokens
            marks.append(ctx_chars)
            state.contexts[digest] = ctx_tokens
            last = ctx_tokens
        if not marks:
            return CacheCut(key, False)
        return CacheCut(key, False, tuple(sorted(boundaries)), tuple(marks), policy.ttl, 0, last)
