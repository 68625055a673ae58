"""Cache-shaped compiling: which prefix of each request the provider is expected to have cached, and where a
request marks what to cache — decided by arithmetic, deterministically, as the cells are made.

A cache group is the cells of one model, trial and prompt variant (`fit.cache_groups`); a cell shares the group's prefix
when its prompt is the group's up to the haystack and its haystack starts at the group's first token. Two provider
styles:
- `prefix` (OpenAI, Gemini): every request's prefix is cached on its own, in steps of ``granularity`` tokens from
  ``minimum`` on, so two cells of a group share every token up to the earlier one's first needle; writing is free,
  so nothing is decided but the order, and a key that routes a group to the same cache.
- `breakpoints` (Anthropic): the request marks where an entry is written (`cache_control`), and a later request
  reads an entry only where its own blocks match the writer's, block by block. So every cell of a group splits its
  haystack at the same points (the group's `Ladder`) up to its first needle, reads the highest point an earlier
  cell wrote, and writes the highest point that enough cells to come are forecast to reach to repay the write
  (1.25 times plain input for five minutes, twice for an hour). The questions asked of one context share it up to
  the question: the first marks it, the others read it.

A random control arm (``control`` of the cells, drawn per cell from the seed) is sent with caching defeated: no
breakpoint, and for providers that cache by themselves a nonce at the very start of the prompt; each cell records
its arm, so that pass rates can be compared. What is predicted here is an estimate: a batch runs its requests in an
order of the provider's choosing, so hits are best-effort, and the usage the provider reports is what is billed.
"""

from __future__ import annotations

import hashlib
import itertools
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .draws import Draws
from .prices import price_for
from .providers.contract import CacheCut, CacheStyle

if TYPE_CHECKING:
    from .haystack import TokenizedText
    from .providers.contract import Provider

LADDER_POINTS = 64  # ladder points up to the longest haystack: blocks per request stay few


@dataclass(frozen=True)
class CachePolicy:
    """Caching for one model's cells, as the spec and the provider settle it."""

    style: CacheStyle
    ttl: str  # 5m | 1h (breakpoints only)
    control: float  # share of cells sent with caching defeated
    reads_to_pay: int  # a written entry pays for itself once read this many times


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


@dataclass(frozen=True)
class Ladder:
    """Where every request of a breakpoints group splits its haystack, at the same points, so that two requests'
    blocks are alike up to the lower one's needle: a point every ``step`` haystack tokens (moved back to a clean
    cut). Per point: its haystack token, the characters of the user message before it, and the prompt's tokens up
    to it as the provider counts them (estimated)."""

    at: tuple[int, ...]
    chars: tuple[int, ...]
    tokens: tuple[int, ...]

    def below(self, token: int) -> int:
        """The index of the last point at or before haystack token ``token`` (-1: none)."""
        return bisect_right(self.at, token) - 1


def ladder_step(longest: int) -> int:
    """Haystack tokens between ladder points: at most `LADDER_POINTS` up to the longest haystack, in 256s."""
    return max(256, -(-longest // (LADDER_POINTS * 256)) * 256)


def build_ladder(
    tt: TokenizedText, start: int, longest: int, prefix_chars: int, head: int, scale: Callable[[int], int]
) -> Ladder:
    """The ladder of a group whose haystacks start at token ``start`` of ``tt`` and reach at most ``longest``
    tokens, after ``prefix_chars`` characters of user message and ``head`` prompt tokens (own units)."""
    step = ladder_step(longest)
    at: list[int] = []
    chars: list[int] = []
    tokens: list[int] = []
    last, count = start, prefix_chars
    for j in range(1, longest // step + 1):
        k = tt.last("clean", min(tt.n_tokens, start + j * step), last)
        if k <= last:
            continue
        count += len(tt.text(last, k))
        at.append(k)
        chars.append(count)
        tokens.append(scale(head + k - start))
        last = k
    return Ladder(tuple(at), tuple(chars), tuple(tokens))


@dataclass(frozen=True)
class CellPrefix:
    """What the planner needs to know of one cell's prompt."""

    needle_tokens: int  # prompt tokens before its first needle (the whole prompt up to the question without one)
    context_chars: int  # characters of the user message before the question
    context_tokens: int  # prompt tokens before the question
    context: str  # digest of the prompt up to the question (the same for the questions of one context)
    siblings_ahead: int  # questions still to come about this same context
    first_insert: int | None  # haystack token of the first needle, where the cell's prompt and haystack start as
    # its group's do (None: its prompt shares nothing with the group's but its context)
    forecast: int  # the haystack token its first needle was forecast at, when the group was opened


@dataclass
class _Group:
    longest: int = 0  # prefix: the longest shared prefix (tokens) an earlier request sent
    contexts: dict[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)  # digest → blocks, tokens read
    ladder: Ladder | None = None
    entries: list[int] = field(default_factory=list)  # ladder points expected cached, ascending
    ahead: list[int] = field(default_factory=list)  # per ladder point: cells to come whose needle is just past it


class CachePlanner:
    """Decides each cell's cut, in compile order; holds per group what the cells before it left in the cache and
    what the cells to come are forecast to need."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._groups: dict[str, _Group] = {}

    def is_control(self, policy: CachePolicy, cell_id: str) -> bool:
        return policy.control > 0 and Draws(self.seed, "cache-control", cell_id).uniform() < policy.control

    def known(self, group: str) -> bool:
        return group in self._groups

    def open(self, group: str, ladder: Ladder | None = None, forecast: Iterable[tuple[int, int]] = ()) -> None:
        """Starts a group: its ladder (breakpoints style) and its cells' forecast first needles, as (haystack
        token, cells) pairs."""
        state = self._groups[group] = _Group(ladder=ladder)
        if ladder is not None:
            state.ahead = [0] * len(ladder.at)
            for token, cells in forecast:
                j = ladder.below(token)
                if j >= 0:
                    state.ahead[j] += cells

    def cut(self, policy: CachePolicy, group: str, control: bool, cell: CellPrefix) -> CacheCut:
        """The cut of one cell of an opened group."""
        key = "nspec-" + hashlib.sha256(group.encode()).hexdigest()[:20]
        state = self._groups[group]
        if state.ladder is not None:  # the cell is no longer to come
            j = state.ladder.below(cell.forecast)
            if j >= 0 and state.ahead[j] > 0:
                state.ahead[j] -= 1
        if control:
            return CacheCut(key, True)
        if policy.style.kind == "prefix":
            return self._prefix_cut(policy.style, state, key, cell)
        return self._breakpoints_cut(policy, state, key, cell)

    @staticmethod
    def _prefix_cut(style: CacheStyle, state: _Group, key: str, cell: CellPrefix) -> CacheCut:
        shared = 0
        if cell.first_insert is not None:
            shared = min(cell.needle_tokens, state.longest)
            state.longest = max(state.longest, cell.needle_tokens)
        if cell.context in state.contexts:
            shared = max(shared, state.contexts[cell.context][1])
        _remember(state, cell, ((), cell.context_tokens))
        read = 0 if shared < style.minimum else shared - (shared - style.minimum) % style.granularity
        return CacheCut(key, False, read_tokens=read)

    @staticmethod
    def _breakpoints_cut(policy: CachePolicy, state: _Group, key: str, cell: CellPrefix) -> CacheCut:
        """Blocks split at the group's ladder up to the cell's needle: a breakpoint on the highest point expected
        cached (read), and one on the highest point that enough cells to come reach to repay writing it; the
        questions asked of one context share it whole: the first marks it, the others read it."""
        if cell.context in state.contexts:
            shared, tokens = state.contexts[cell.context]
            _remember(state, cell, (shared, tokens))
            return CacheCut(key, False, shared, (shared[-1],), policy.ttl, read_tokens=tokens)
        minimum = policy.style.minimum
        blocks: tuple[int, ...] = ()
        marks: tuple[int, ...] = ()
        read = written = 0
        ladder = state.ladder
        if ladder is not None and cell.first_insert is not None:
            top = ladder.below(cell.first_insert)
            lowest = bisect_left(ladder.tokens, minimum)
            read_at = next((j for j in reversed(state.entries) if j <= top), -1)
            # cells to come whose needle is at or past point j, for j from the top down
            reach = itertools.accumulate(reversed(state.ahead[: top + 1]), initial=sum(state.ahead[top + 1 :]))
            pays = (
                j
                for j, cells in zip(range(top, -1, -1), itertools.islice(reach, 1, None), strict=False)
                if cells >= policy.reads_to_pay
            )
            write_at = next((j for j in pays if j > read_at and j >= lowest), -1)
            if write_at >= 0:
                insort(state.entries, write_at)
            blocks = ladder.chars[: max(read_at, write_at) + 1]
            marks = tuple(ladder.chars[j] for j in (read_at, write_at) if j >= 0)
            read = ladder.tokens[read_at] if read_at >= 0 else 0
            written = ladder.tokens[write_at] - read if write_at > read_at else 0
        if cell.siblings_ahead >= policy.reads_to_pay and cell.context_tokens >= minimum:
            if cell.context_chars not in blocks:
                blocks = (*blocks, cell.context_chars)
            marks = (*dict.fromkeys((*marks, cell.context_chars)),)
            written = cell.context_tokens - read
            _remember(state, cell, (blocks, cell.context_tokens))
        if not marks:
            return CacheCut(key, False)
        return CacheCut(key, False, blocks, marks, policy.ttl, read, written)


def _remember(state: _Group, cell: CellPrefix, shape: tuple[tuple[int, ...], int]) -> None:
    """Keeps a context's shape while questions about it are still to come, and forgets it after the last."""
    if cell.siblings_ahead > 0:
        state.contexts.setdefault(cell.context, shape)
    else:
        state.contexts.pop(cell.context, None)
