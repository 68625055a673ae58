"""Building one cell's request text: cut the haystack to length, place the needles, count every token exactly.

The user message is a sequence of pieces — template text, haystack token ranges, inserted needles — whose tokens
are counted without re-tokenising the haystack: a haystack range between clean cut points has exactly as many tokens
as its slice of the token array, and where two pieces meet, the difference the join makes is measured on a few
bytes either side (from the nearest clean point inward), which is exact because clean points split the same way in
any text.

What the request format adds around the messages' texts comes from the tokenizer (`Tokenizer.framing`): OpenAI's
published formula for chat requests, or the local engine's plain-text rendering.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from nspec.errors import CompileError
from nspec.prompt import Prompt, Turn

from .haystack import TokenizedText
from .tokenizers import Tokenizer

# How far short of its target a text-haystack cell may fall: the cut goes back to the last clean point, usually a
# word boundary a token or two away; layout such as blank lines before a chapter heading can stretch it to ~10.
# (Stack cells are cut between items, so they may fall short by up to one item and its separator.)
TEXT_TOLERANCE = 16
# How far from its requested place a needle may move to reach a sentence boundary (text haystacks). Prose has one
# every sentence; a text with none this close (a table, code) cannot hold a needle between sentences.
BOUNDARY_REACH = 1024
_CLEAN_IN_TEXT = re.compile(rb"(?<=[\x21-\x7e]) |(?<=\n)[A-Za-z0-9]")
_WHITESPACE = b" \t\r\n"
_SPACES = (" ", "\t", "\r", "\n")

Piece = str | tuple[int, int]  # a text, or a range of haystack tokens
# Tokens of the haystack between two of its clean tokens: their distance, where it is counted by its own tokenizer.
Between = Callable[[int, int], int]


class FitError(CompileError):
    """A cell cannot be built as asked (e.g. the prompt alone is longer than the context length)."""


@dataclass(frozen=True)
class PromptParts:
    """A cell's prompt around the haystack, placeholders other than {haystack} already filled in."""

    system: str | None
    prefix: str  # user template before {haystack}
    suffix: str  # user template after {haystack}
    prefill: str | None
    reserve: int
    question_message: str | None = None  # a user message of its own after the haystack's (needlehaystack's layout)

    def prompt(self, user: str) -> Prompt:
        """The request's prompt once the user message (prefix, haystack, suffix) is built."""
        later = () if self.question_message is None else (Turn("user", self.question_message),)
        return Prompt(self.system, (Turn("user", user), *later), self.prefill)

    def folded(self) -> PromptParts:
        """The parts for a model that cannot continue a prefill: the prefill ends the last user message
        (`nspec.prompt.Prompt.folded`)."""
        if self.prefill is None:
            return self
        if self.question_message is not None:
            return replace(self, question_message=self.question_message + self.prefill, prefill=None)
        return replace(self, suffix=self.suffix + self.prefill, prefill=None)

    def others(self) -> list[str]:
        """The request's texts besides the haystack's user message."""
        return [text for text in (self.system, self.question_message, self.prefill) if text is not None]


@dataclass(frozen=True)
class Insert:
    """Something to place in the haystack: a needle sentence, or a stack item (``repeat`` times in a row)."""

    text: str
    depth: float
    repeat: int = 1


@dataclass(frozen=True)
class BuiltContext:
    user: str
    tokens: int  # the whole request, in the model's tokens
    haystack_tokens: int  # haystack and needles, without the templates
    depths: tuple[float, ...]  # actual depth of each insert, in percent
    span: tuple[int, int]  # the haystack tokens used, [begin, end)
    own_tokens: int  # the whole request in the tokenizer's own units (before a proxy's factor)
    first_insert: int  # the haystack token the first insert goes before (the span's end when there is none)
    pieces: tuple[Piece, ...]  # the user message as it was counted: ``user`` is their texts joined


def fixed_tokens(tokenizer: Tokenizer, parts: PromptParts) -> int:
    """Tokens of everything but the user message's haystack part (in the tokenizer's own units)."""
    others = parts.others()
    framing = tokenizer.framing(1 + len(others), parts.prefill is not None)
    return framing + sum(tokenizer.own_count(text) for text in others)


def build_context(
    tt: TokenizedText,
    tokenizer: Tokenizer,
    start: int,
    parts: PromptParts,
    inserts: list[Insert],
    target: int,
    stack_separator: str | None = None,
) -> BuiltContext:
    """Fit haystack tokens from ``start`` plus ``inserts`` so the whole request plus ``parts.reserve`` is at most
    ``target`` tokens, as close to it as clean cut points allow."""
    goal = target - parts.reserve
    fixed = fixed_tokens(tokenizer, parts)
    # The haystack's last token is cut at a clean point, or, when a needle goes at its very end, after a sentence.
    at_end = any(i.depth >= 100 for i in inserts)
    mode = "boundary" if stack_separator is not None or at_end else "clean"
    texts = [_insert_text(i, stack_separator) for i in inserts]
    sizes = [tokenizer.own_count(t) for t in texts]
    room = _room(tokenizer, parts, fixed, sizes, target)
    if start + room > tt.n_tokens:
        raise FitError(f"the haystack has {tt.n_tokens - start} tokens from its start; {room} are needed")
    fit = _Fit(tt, tokenizer, parts, inserts, texts, sizes, stack_separator, fixed, goal, target)
    if at_end and stack_separator is None and not any(i.depth <= 0 for i in inserts):
        # A needle at the very end follows a whole sentence: end the haystack at the first sentence end past the
        # room, and cut its start instead (no needle there), so the context is still filled to its length.
        end = tt.next("boundary", start + room, min(tt.n_tokens - 1, start + room + BOUNDARY_REACH))
        if tt.boundary(end):
            return _with_haystack(fit.moving_start(tt.next("clean", end - room, end), end, floor=start), target)
    end = tt.last(mode, start + room, start)
    if at_end and stack_separator is None and (start + room - end > BOUNDARY_REACH or end == start):
        raise FitError(
            f"no sentence ends between the haystack's start (token {start}) and the end of its room (token "
            f"{start + room}, or {BOUNDARY_REACH} tokens before it), so a needle at depth 100 cannot follow a whole "
            "sentence: use a longer context"
        )
    return _with_haystack(fit.moving_end(start, end, mode), target)


def haystack_room(
    tokenizer: Tokenizer, parts: PromptParts, inserts: list[Insert], target: int, stack_separator: str | None = None
) -> int:
    """The haystack tokens (the tokenizer's own) that ``build_context`` starts from: what the prompt, the inserts
    and the answer budget leave of ``target``. Counts only those, never the haystack: a FitError when they alone
    need more than ``target``, as `build_context` refuses it."""
    sizes = [tokenizer.own_count(_insert_text(i, stack_separator)) for i in inserts]
    return _room(tokenizer, parts, fixed_tokens(tokenizer, parts), sizes, target)


def _room(tokenizer: Tokenizer, parts: PromptParts, fixed: int, sizes: list[int], target: int) -> int:
    guess = sum(sizes) + 2 * len(sizes)
    room = (
        _unscale(tokenizer, target - parts.reserve) - fixed - guess - tokenizer.own_count(parts.prefix + parts.suffix)
    )
    if room < 0:
        raise FitError(f"the prompt and needles alone need more than {target} tokens")
    return room


def needles_keep(tokenizer: Tokenizer, parts: PromptParts, inserts: list[Insert], target: int) -> int:
    """needlehaystack's haystack tokens (`build_token_context`): the context less the needles; a FitError when the
    needles alone fill it."""
    sizes = [tokenizer.own_count(i.text) for i in inserts]
    keep = target - parts.reserve - sum(sizes)
    if keep <= 0:
        raise FitError(f"the needles alone need {sum(sizes)} of the {target - parts.reserve} context tokens")
    return keep


def build_on_span(
    tt: TokenizedText,
    tokenizer: Tokenizer,
    parts: PromptParts,
    inserts: list[Insert],
    span: tuple[int, int],
    target: int,
    stack_separator: str | None = None,
) -> tuple[BuiltContext, int]:
    """The context of haystack tokens ``span`` with ``inserts`` (a span another cell was fitted to), and its total
    in model tokens."""
    texts = [_insert_text(i, stack_separator) for i in inserts]
    sizes = [tokenizer.own_count(t) for t in texts]
    fixed = fixed_tokens(tokenizer, parts)
    fit = _Fit(tt, tokenizer, parts, inserts, texts, sizes, stack_separator, fixed, target - parts.reserve, target)
    return fit.build(*span)


def build_token_context(
    tt: TokenizedText, tokenizer: Tokenizer, start: int, parts: PromptParts, inserts: list[Insert], target: int
) -> BuiltContext:
    """needlehaystack's rule (`haystack.boundary: period-token`, from its `insert_needle`): the context — haystack
    and needles, counted as token lists in the tokenizer's own tokens — is exactly ``target - parts.reserve``
    tokens: the haystack's tokens from ``start``, cut at whatever token that leaves, and each needle, as written
    (its own white space and all), just after the last period token at or before its depth's share of those haystack
    tokens, or after the last of them at depth 100. The request is then counted as sent (`_count_pieces`)."""
    keep = needles_keep(tokenizer, parts, inserts, target)
    sizes = [tokenizer.own_count(i.text) for i in inserts]
    end = start + keep
    if end > tt.n_tokens:
        raise FitError(f"the haystack has {tt.n_tokens - start} tokens from its start; {keep} are needed")
    positions = []
    for insert in inserts:
        k = end if insert.depth >= 100 else start + int(keep * insert.depth / 100)
        while start < k < end and tt.data[tt.starts[k - 1] : tt.starts[k]] != b".":
            k -= 1
        positions.append(k)
    texts = [i.text for i in inserts]
    # Placed as given, like stack items: an empty separator glues nothing on.
    pieces, depths = assemble_at(tt, start, end, positions, inserts, texts, sizes, "")
    user_pieces = (parts.prefix, *pieces, parts.suffix)
    user = "".join(p if isinstance(p, str) else tt.text(*p) for p in user_pieces)
    user_tokens = count_pieces(tt, tokenizer, user_pieces)
    fixed = fixed_tokens(tokenizer, parts)
    hay = user_tokens - tokenizer.own_count(parts.prefix) - tokenizer.own_count(parts.suffix)
    first = min(positions, default=end)
    total = tokenizer.scale(fixed + user_tokens)
    built = BuiltContext(user, total, hay, depths, (start, end), fixed + user_tokens, first, user_pieces)
    return _with_haystack(built, target)


def _with_haystack(built: BuiltContext, target: int) -> BuiltContext:
    """A context is a haystack with needles in it: one that the prompt and needles fill on their own is not one."""
    if built.span[0] >= built.span[1]:
        raise FitError(f"the prompt and needles leave no room for any haystack in {target} tokens")
    return built


@dataclass
class _Fit:
    """The search for the longest haystack span that fits: one edge fixed, the other moved cut point by cut point
    (24 rounds are plenty: each round jumps by the measured excess or room)."""

    tt: TokenizedText
    tokenizer: Tokenizer
    parts: PromptParts
    inserts: list[Insert]
    texts: list[str]
    sizes: list[int]
    stack_separator: str | None
    fixed: int
    goal: int
    target: int

    def build(self, begin: int, end: int) -> tuple[BuiltContext, int]:
        """The context of haystack tokens [begin, end) with the inserts, and its total in model tokens."""
        measured = self.measure(begin, end)
        return measured.context(self.tt, self.parts), measured.total

    def measure(self, begin: int, end: int) -> _Measured:
        """The context of haystack tokens [begin, end) with the inserts, counted; its text is made only for the one
        a search keeps."""
        tt, tokenizer, parts = self.tt, self.tokenizer, self.parts
        positions = place(tt, begin, end, self.inserts, self.sizes, self.stack_separator is None)
        pieces, depths = assemble_at(
            tt, begin, end, positions, self.inserts, self.texts, self.sizes, self.stack_separator
        )
        user_tokens = count_pieces(tt, tokenizer, (parts.prefix, *pieces, parts.suffix))
        total = tokenizer.scale(self.fixed + user_tokens)
        hay = user_tokens - tokenizer.own_count(parts.prefix) - tokenizer.own_count(parts.suffix)
        first = min(positions, default=end)
        return _Measured(pieces, total, hay, depths, (begin, end), self.fixed + user_tokens, first)

    def moving_end(self, begin: int, end: int, mode: str) -> BuiltContext:
        best: _Measured | None = None
        for _ in range(24):
            measured = self.measure(begin, end)
            total = measured.total
            if total <= self.goal:
                best = measured
                grown = self.tt.last(
                    mode, min(self.tt.n_tokens, end + _unscale(self.tokenizer, self.goal - total)), end
                )
                if grown <= end:
                    return self._done(best)
                end = grown  # room is left: try the next cut point further on
            elif best is not None:
                return self._done(best)  # growing went one cut too far
            elif end <= begin:
                break
            else:
                end = self.tt.last(mode, max(begin, end - _unscale(self.tokenizer, total - self.goal) - 1), begin)
        return self._done(best)

    def moving_start(self, begin: int, end: int, floor: int) -> BuiltContext:
        best: _Measured | None = None
        for _ in range(24):
            measured = self.measure(begin, end)
            total = measured.total
            if total <= self.goal:
                best = measured
                earlier = self.tt.next("clean", max(floor, begin - _unscale(self.tokenizer, self.goal - total)), begin)
                if earlier >= begin:
                    return self._done(best)
                begin = earlier  # room is left: start at an earlier cut point
            elif best is not None:
                return self._done(best)
            elif begin >= end:
                break
            else:
                begin = self.tt.next("clean", min(end, begin + _unscale(self.tokenizer, total - self.goal) + 1), end)
        return self._done(best)

    def _done(self, best: _Measured | None) -> BuiltContext:
        if best is None:
            raise FitError(f"cannot fit the request into {self.target} tokens")
        return best.context(self.tt, self.parts)


@dataclass(frozen=True)
class _Measured:
    """A context as a fit measures it: its pieces, not yet joined into text."""

    pieces: list[Piece]  # the haystack part's
    total: int
    haystack_tokens: int
    depths: tuple[float, ...]
    span: tuple[int, int]
    own_tokens: int
    first_insert: int

    def context(self, tt: TokenizedText, parts: PromptParts) -> BuiltContext:
        user_pieces = (parts.prefix, *self.pieces, parts.suffix)
        return BuiltContext(
            "".join(p if isinstance(p, str) else tt.text(*p) for p in user_pieces),
            self.total,
            self.haystack_tokens,
            self.depths,
            self.span,
            self.own_tokens,
            self.first_insert,
            user_pieces,
        )


def _unscale(tokenizer: Tokenizer, tokens: int) -> int:
    """The most of the tokenizer's own tokens that make at most ``tokens`` model tokens."""
    if tokens >= 0 and tokenizer.scale(tokens) <= tokens < tokenizer.scale(tokens + 1):
        return tokens  # an exact tokenizer's scale is the identity: no search
    low, high = 0, max(1, tokens) * 16
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if tokenizer.scale(mid) <= tokens else (low, mid - 1)
    return low


def _insert_text(insert: Insert, stack_separator: str | None) -> str:
    if stack_separator is None:
        return insert.text
    return (insert.text + stack_separator) * insert.repeat


def place(tt: TokenizedText, start: int, end: int, inserts: list[Insert], sizes: list[int], bounded: bool) -> list[int]:
    """Where each insert goes in the haystack tokens [start, end): a boundary near its depth."""
    span = end - start
    # Depths refer to the final context, other needles included: place in order of depth, each aimed at its share
    # of (haystack + every needle but itself), less the needle tokens already placed before it.
    positions = [start] * len(inserts)
    placed, floor = 0, start
    for i in sorted(range(len(inserts)), key=lambda i: (inserts[i].depth, i)):
        depth = inserts[i].depth
        if depth >= 100:
            positions[i] = end
        elif depth > 0:
            wanted = start + round((span + sum(sizes) - sizes[i]) * depth / 100) - placed
            positions[i] = _boundary_near(tt, min(end, max(floor, wanted)), floor, end, bounded)
        positions[i] = max(positions[i], floor)
        floor, placed = positions[i], placed + sizes[i]
    return positions


def assemble_at(
    tt: TokenizedText,
    start: int,
    end: int,
    positions: list[int],
    inserts: list[Insert],
    texts: list[str],
    sizes: list[int],
    stack_separator: str | None,
) -> tuple[list[Piece], tuple[float, ...]]:
    """The pieces of the haystack part with each insert at its given position, and each insert's actual depth."""
    span = end - start
    order = sorted(range(len(inserts)), key=lambda i: (positions[i], inserts[i].depth, i))
    pieces: list[Piece] = []
    cursor = start
    starts_at: dict[int, int] = {}  # insert index → context tokens before it
    placed_before = 0
    for group_start in sorted(set(positions)):
        members = [i for i in order if positions[i] == group_start]
        if group_start > cursor:
            pieces.append((cursor, group_start))
        cursor = group_start
        joined = _join_group(tt, group_start, start, end, [texts[i] for i in members], stack_separator)
        pieces.append(joined)
        for i in members:
            starts_at[i] = (group_start - start) + placed_before
            placed_before += sizes[i]
    if end > cursor:
        pieces.append((cursor, end))
    total = span + placed_before
    depths = []
    for i in range(len(inserts)):
        rest = max(1, total - sizes[i])
        depths.append(round(100 * min(starts_at[i], rest) / rest, 2))
    return pieces, tuple(depths)


def _boundary_near(tt: TokenizedText, k: int, low: int, high: int, bounded: bool) -> int:
    """The boundary nearest token ``k`` in [low, high] (``low`` is itself one: the haystack's start or the needle
    before); for text haystacks it must lie within `BOUNDARY_REACH` tokens, or there is none to use."""
    if not bounded:
        return tt.last("boundary", k, low)
    back = tt.last("boundary", k, max(low, k - BOUNDARY_REACH))
    found_back = tt.boundary(back)
    ahead = tt.next("boundary", k, min(high, k + BOUNDARY_REACH))
    found_ahead = tt.boundary(ahead) and ahead <= high
    if found_back and (not found_ahead or k - back <= ahead - k):
        return back
    if found_ahead:
        return ahead
    raise FitError(
        f"no sentence boundary within {BOUNDARY_REACH} tokens of token {k} of the haystack: a needle goes between "
        "sentences, and this text has none there (use prose, or a stack of items)"
    )


def _join_group(
    tt: TokenizedText, pos: int, start: int, end: int, texts: list[str], stack_separator: str | None
) -> str:
    """Needles placed at one point, with the spaces that keep them separate sentences (none where a needle brings
    its own white space, as needlehaystack's "\nThe best thing...\n" does)."""
    if stack_separator is not None:
        return "".join(texts)
    body = " ".join(texts)
    data, byte = tt.data, tt.starts[pos]
    before = " " if pos > start and data[byte - 1] not in _WHITESPACE and body[:1] not in _SPACES else ""
    after = " " if pos < end and data[byte] not in _WHITESPACE and body[-1:] not in _SPACES else ""
    return before + body + after


def count_pieces(
    tt: TokenizedText, tokenizer: Tokenizer, pieces: tuple[Piece, ...], between: Between | None = None
) -> int:
    """Exact tokens of the concatenated pieces in ``tokenizer``'s own units. The haystack's tokens between clean
    points are counted by ``between``: by default their distance (``tt`` tokenised by ``tokenizer``); another
    tokenizer counts them in its own tokenisation of the same text."""
    present = [p for p in pieces if (p if isinstance(p, str) else p[1] > p[0])]
    distance = between or (lambda first, last: last - first)
    total = 0
    for piece in present:
        total += (
            tokenizer.own_count(piece) if isinstance(piece, str) else _range_tokens(tt, tokenizer, distance, *piece)
        )
    for left, right in itertools.pairwise(present):
        tail, head = _tail(tt, left), _head(tt, right)
        joined = tokenizer.own_count(tail + head)
        total += joined - tokenizer.own_count(tail) - tokenizer.own_count(head)
    return total


def _range_tokens(tt: TokenizedText, tokenizer: Tokenizer, between: Between, a: int, b: int) -> int:
    """Exact tokens of the haystack text of tokens [a, b) on its own: ``between`` its clean points; an end that is
    not one (`boundary: period-token` cuts at any token) re-encodes only the bytes out to the nearest clean point."""
    first, last = tt.next("clean", a, b), tt.last("clean", b, a)
    if first >= last:
        return tokenizer.own_count(tt.text(a, b))
    head = tokenizer.own_count(tt.text(a, first)) if first > a else 0
    tail = tokenizer.own_count(tt.text(last, b)) if b > last else 0
    return head + between(first, last) + tail


def _tail(tt: TokenizedText, piece: Piece) -> str:
    """The end of a piece from its last clean point inward (the part a join can change)."""
    if isinstance(piece, str):
        data = piece.encode()
        cuts = [m.start() for m in _CLEAN_IN_TEXT.finditer(data, max(0, len(data) - 256))]
        cut = next((c for c in reversed(cuts) if 0 < c < len(data)), 0)
        return data[cut:].decode()
    a, b = piece
    return tt.text(tt.last("clean", b - 1, a), b)


def _head(tt: TokenizedText, piece: Piece) -> str:
    """The start of a piece up to its first clean point."""
    if isinstance(piece, str):
        data = piece.encode()
        m = next((m for m in _CLEAN_IN_TEXT.finditer(data, 1, min(len(data), 256)) if m.start() > 0), None)
        return (data[: m.start()] if m else data).decode()
    a, b = piece
    return tt.text(a, tt.next("clean", a + 1, b))
