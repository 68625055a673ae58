"""Prompt caches as each provider keeps them, so that a rehearsal measures what caching saves.

- Anthropic (platform.claude.com, "Prompt caching"): an entry is written at each block marked `cache_control`, for
  five minutes or an hour (`ttl`); a request reads the longest entry that matches it exactly up to one of its block
  boundaries, looking back at most 20 blocks from each breakpoint; a hit refreshes the entry; a prefix shorter than the
  model's minimum is not cached at all; at most four breakpoints, and a one-hour entry may not follow a five-minute
  one. Usage splits the input into `cache_read_input_tokens`, `cache_creation_input_tokens` (by TTL in
  `cache_creation`) and the rest, `input_tokens`.
- OpenAI (platform.openai.com/docs/guides/prompt-caching): every prompt of 1,024 tokens or more is cached by itself,
  in steps of 128 tokens, for five to ten minutes of inactivity; `usage.*_tokens_details.cached_tokens` says how
  many of the prompt's tokens were read. Gemini 2.5 caches implicitly the same way from its model's minimum
  (`usageMetadata.cachedContentTokenCount`).
The emulator's caches are shared by every key, as one organisation's would be.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

from nspec.compiler.providers.contract import message_text
from nspec.compiler.tokenizers import encoding
from nspec.runners.emulator.generation import counted_tokens
from nspec.runners.providers.anthropic import cache_minimum

MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
PREFIX_TTL_SECONDS = 600.0  # OpenAI keeps a prefix five to ten minutes after its last use


def breakpoint_problem(body: dict[str, Any]) -> str | None:
    """What Anthropic refuses in a request's cache_control marks (its 400 messages), or None."""
    marks: list[dict[str, Any]] = [
        b["cache_control"] for b in _blocks(body) if isinstance(b.get("cache_control"), dict)
    ]
    if len(marks) > MAX_BREAKPOINTS:
        return f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(marks)}."
    ttls = [str(m.get("ttl", "5m")) for m in marks]
    bad = next((t for t in ttls if t not in TTL_SECONDS), None)
    if bad is not None:
        return f"cache_control.ttl: Input should be '5m' or '1h' (got '{bad}')"
    if "1h" in ttls and "5m" in ttls and ttls.index("5m") < len(ttls) - 1 - ttls[::-1].index("1h"):
        return "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
    return None


def _blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's content blocks in the order a cache prefix reads them: system, then each message's."""
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, str):
        out.append({"type": "text", "text": system, "_message": -1})
    elif isinstance(system, list):
        out += [{**b, "_message": -1} for b in system if isinstance(b, dict)]
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, str):
            out.append({"type": "text", "text": content, "_message": i, "_role": message.get("role")})
        elif isinstance(content, list):
            out += [{**b, "_message": i, "_role": message.get("role")} for b in content if isinstance(b, dict)]
    return out


class PromptCaches:
    """Every provider's cache entries, at most `CAPACITY` of them: past it the least recently used goes first, as
    the real caches (finite, per machine) drop entries under load before their time is up. Unbounded, a run of
    100,000 long prompts would keep millions of OpenAI's 128-token steps."""

    CAPACITY = 200_000

    def __init__(self) -> None:
        self._entries: OrderedDict[str, float] = OrderedDict()  # prefix digest → when it expires, oldest use first
        self._lock = threading.Lock()

    def _keep(self, digest: str, expiry: float) -> None:
        self._entries[digest] = max(self._entries.get(digest, 0.0), expiry)
        self._entries.move_to_end(digest)
        if len(self._entries) > self.CAPACITY:
            self._entries.popitem(last=False)

    def _live(self, digest: str, now: float) -> bool:
        expiry = self._entries.get(digest)
        return expiry is not None and expiry > now

    def anthropic(self, body: dict[str, Any], total: int, now: float) -> dict[str, Any]:
        """The usage fields of a Messages request whose input is ``total`` tokens, its cache read and written."""
        blocks = _blocks(body)
        marks = [i for i, b in enumerate(blocks) if isinstance(b.get("cache_control"), dict)]
        plain = {"input_tokens": total, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if not marks:
            return {**plain, "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}}
        minimum = cache_minimum(str(body.get("model", "")))
        # Each block boundary: the digest of everything up to it, and its tokens as usage counts them (3 priming,
        # 4 per message begun, the texts; each block counted once, as it comes).
        digests, tokens = [], []
        state = hashlib.sha256(str(body.get("model", "")).encode())
        begun: set[int] = set()
        count = 3
        for block in blocks:
            text = str(block.get("text", ""))
            state.update(repr((block["_message"], block.get("_role"), text)).encode())
            digests.append(state.copy().hexdigest())
            count += counted_tokens(text) + (4 if block["_message"] not in begun else 0)
            begun.add(block["_message"])
            tokens.append(count)
        with self._lock:
            # Each breakpoint looks back at most 20 blocks for an entry; the longest hit is read.
            looked = sorted({i for m in marks for i in range(max(0, m - LOOKBACK_BLOCKS + 1), m + 1)}, reverse=True)
            hit = next((i for i in looked if tokens[i] >= minimum and self._live(digests[i], now)), None)
            read = 0
            if hit is not None:
                read = tokens[hit]
                self._keep(digests[hit], now + 300.0)  # a hit refreshes it
            written = {"5m": 0, "1h": 0}
            upto = read
            for i in marks:
                ttl = str(blocks[i]["cache_control"].get("ttl", "5m"))
                if tokens[i] < minimum or tokens[i] <= upto:
                    continue
                self._keep(digests[i], now + TTL_SECONDS[ttl])
                written[ttl] += tokens[i] - upto
                upto = tokens[i]
        creation = written["5m"] + written["1h"]
        return {
            "input_tokens": max(0, total - read - creation),
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": read,
            "cache_creation": {"ephemeral_5m_input_tokens": written["5m"], "ephemeral_1h_input_tokens": written["1h"]},
        }

    def prefix(self, scope: str, text: str, minimum: int, step: int, now: float) -> int:
        """Tokens of ``text`` (the prompt as the model reads it) found cached, counted as OpenAI counts them; the
        prompt is cached in turn, every ``step`` tokens from ``minimum`` on."""
        ids = encoding("o200k_base").encode(text)
        if len(ids) < minimum:
            return 0
        state = hashlib.sha256(scope.encode())
        state.update(repr(ids[:minimum]).encode())
        steps = [(minimum, state.copy().hexdigest())]
        for end in range(minimum + step, len(ids) + 1, step):
            state.update(repr(ids[end - step : end]).encode())
            steps.append((end, state.copy().hexdigest()))
        with self._lock:
            hit = 0
            for end, digest in steps:
                if not self._live(digest, now):
                    break
                hit = end
            for _, digest in steps:
                self._keep(digest, now + PREFIX_TTL_SECONDS)
        return hit


def chat_prompt_text(messages: list[dict[str, Any]]) -> str:
    """A chat request's prompt as one text, role by role: what a prefix cache keys."""
    return "".join(f"<{m.get('role')}>{message_text(m.get('content'))}" for m in messages)


def openai_cached(caches: PromptCaches, body: dict[str, Any], answer: dict[str, Any], now: float) -> None:
    """Sets an OpenAI answer's cached tokens (chat completion or response) from the prefix cache."""
    model = str(body.get("model", ""))
    if "messages" in body:
        text, details = chat_prompt_text(body["messages"]), answer["usage"]["prompt_tokens_details"]
    else:
        turns = body.get("input")
        turns = [{"role": "user", "content": turns}] if isinstance(turns, str) else turns or []
        head = [{"role": "system", "content": body["instructions"]}] if body.get("instructions") else []
        text, details = chat_prompt_text([*head, *turns]), answer["usage"]["input_tokens_details"]
    details["cached_tokens"] = caches.prefix("openai:" + model, text, 1024, 128, now)


def google_cached(caches: PromptCaches, request: dict[str, Any], response: dict[str, Any], now: float) -> None:
    """Sets a Gemini response's cached tokens from its implicit cache (from 1,024 tokens on Flash models, 4,096 on
    the others; counted here in steps of 128)."""
    model = str(request.get("model", "")).removeprefix("models/")
    system = (request.get("systemInstruction") or {}).get("parts") or []
    texts = [p.get("text", "") for p in system]
    texts += [
        f"<{c.get('role')}>" + "".join(p.get("text", "") for p in c.get("parts") or [])
        for c in request.get("contents") or []
    ]
    minimum = 1024 if "flash" in model else 4096
    cached = caches.prefix("google:" + model, "".join(texts), minimum, 128, now)
    if cached:
        response["usageMetadata"]["cachedContentTokenCount"] = cached
