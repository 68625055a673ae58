"""Live-call rate limits as the providers apply them: token buckets per minute for requests and tokens, reported
in every response's headers, and 429 with retry-after when a request would exceed them."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from nspec.runners.emulator.anthropic_batches import rfc3339
from nspec.runners.emulator.config import RateLimits

UNLIMITED = 1_000_000_000


class _Bucket:
    def __init__(self, per_minute: int | None, now: float, burst_seconds: float) -> None:
        self.limit = per_minute or UNLIMITED  # what the headers report
        self.rate = self.limit / 60  # refill per second
        self.capacity = max(1.0, self.rate * burst_seconds) if per_minute else float(UNLIMITED)
        self.level = self.capacity
        self.stamp = now

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_for(self, amount: int) -> float:
        """Seconds until ``amount`` is available (0 if it is)."""
        missing = min(amount, self.capacity) - self.level
        return 0.0 if missing <= 0 else missing / self.rate

    def reset_seconds(self) -> float:
        """Seconds until the bucket is full again."""
        return (self.capacity - self.level) / self.rate


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after: float
    headers: dict[str, str]


class Limiter:
    """One limiter per provider."""

    def __init__(self, limits: RateLimits, now: float) -> None:
        self.requests = _Bucket(limits.requests_per_minute, now, limits.burst_seconds)
        self.tokens = _Bucket(limits.tokens_per_minute, now, limits.burst_seconds)
        self.lock = threading.Lock()

    def take(self, tokens: int, now: float, provider: str) -> Decision:
        with self.lock:
            self.requests.refill(now)
            self.tokens.refill(now)
            wait = max(self.requests.wait_for(1), self.tokens.wait_for(tokens))
            allowed = wait == 0 and tokens <= self.tokens.limit  # larger than a minute's budget: never
            if allowed:
                self.requests.level -= 1
                self.tokens.level -= min(tokens, self.tokens.capacity)
            return Decision(allowed, wait, self._headers(provider, now))

    def _headers(self, provider: str, now: float) -> dict[str, str]:
        r, t = self.requests, self.tokens
        if provider == "openai":
            return {
                "x-ratelimit-limit-requests": str(r.limit),
                "x-ratelimit-remaining-requests": str(max(0, math.floor(r.level))),
                "x-ratelimit-reset-requests": duration(r.reset_seconds()),
                "x-ratelimit-limit-tokens": str(t.limit),
                "x-ratelimit-remaining-tokens": str(max(0, math.floor(t.level))),
                "x-ratelimit-reset-tokens": duration(t.reset_seconds()),
            }
        if provider != "anthropic":
            return {}  # Gemini and Mistral document no rate-limit headers; a 429 is all they say
        headers = {}
        for name, bucket in (("requests", r), ("tokens", t), ("input-tokens", t), ("output-tokens", t)):
            headers[f"anthropic-ratelimit-{name}-limit"] = str(bucket.limit)
            headers[f"anthropic-ratelimit-{name}-remaining"] = str(max(0, math.floor(bucket.level)))
            headers[f"anthropic-ratelimit-{name}-reset"] = rfc3339(now + bucket.reset_seconds())
        return headers


def duration(seconds: float) -> str:
    """OpenAI's reset format: 1s, 6m0s, 1h2m3s, 250ms."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"
