"""Live runs: one call per request, paced so the provider's limits are never hit when they are known.

Per model, a limiter holds a concurrency cap and token buckets for requests and tokens per minute (input plus the
request's max_tokens), from the spec's `rate_limits`. The rate-limit headers of every response tighten it further:
when a provider says a budget is spent, calls wait for its reset instead of provoking a 429. A 429 or a 5xx is
retried after `retry-after-ms` / `retry-after` when given, else after an exponential backoff with jitter. Each result
is appended as it arrives, so a crash loses only the requests in flight.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nspec.runners.providers import Credentials, Outcome, parse_anthropic, parse_openai

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$")


@dataclass
class Bucket:
    per_minute: float | None
    level: float = 0.0
    stamp: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.level = self.per_minute or 0.0

    def delay(self, amount: float) -> float:
        """Seconds to wait before ``amount`` fits (and takes it when it does)."""
        if self.per_minute is None:
            return 0.0
        now = time.monotonic()
        self.level = min(self.per_minute, self.level + (now - self.stamp) * self.per_minute / 60)
        self.stamp = now
        amount = min(amount, self.per_minute)  # a single request larger than the budget waits for a full one
        if self.level >= amount:
            self.level -= amount
            return 0.0
        return (amount - self.level) * 60 / self.per_minute


class Limiter:
    """Pacing of one model's live calls."""

    def __init__(self, limits: dict[str, Any]) -> None:
        self.slots = asyncio.Semaphore(int(limits.get("concurrency", 8)))
        self.requests = Bucket(limits.get("requests_per_minute"))
        self.tokens = Bucket(limits.get("tokens_per_minute"))
        self.blocked_until = 0.0  # from headers: a budget is spent until then
        self.lock = asyncio.Lock()

    async def acquire(self, tokens: int) -> None:
        """Wait for a slot and for room in every budget; waiters queue behind the lock, so pacing is FIFO."""
        await self.slots.acquire()
        async with self.lock:
            while True:
                wait = self.blocked_until - time.monotonic()
                if wait <= 0:
                    wait = self.requests.delay(1)
                    if wait <= 0:
                        wait = self.tokens.delay(tokens)
                        if wait <= 0:
                            return
                        self.requests.level += 1  # not sent yet: give the request back, take both together
                await asyncio.sleep(wait)

    def release(self) -> None:
        self.slots.release()

    def learn(self, headers: Any, provider: str) -> None:
        """Pause before the provider's own limits are hit, as its headers report them."""
        if provider == "anthropic":
            pairs = [
                (
                    headers.get(f"anthropic-ratelimit-{n}-remaining"),
                    _until(headers.get(f"anthropic-ratelimit-{n}-reset")),
                )
                for n in ("requests", "tokens")
            ]
        else:
            pairs = [
                (headers.get(f"x-ratelimit-remaining-{n}"), _duration(headers.get(f"x-ratelimit-reset-{n}")))
                for n in ("requests", "tokens")
            ]
        limits = [
            headers.get(f"anthropic-ratelimit-{n}-limit")
            if provider == "anthropic"
            else headers.get(f"x-ratelimit-limit-{n}")
            for n in ("requests", "tokens")
        ]
        for (remaining, reset), limit in zip(pairs, limits, strict=True):
            if remaining is not None and reset is not None and int(remaining) <= 0:
                # The reset is when the whole budget is back; one unit comes back after reset / limit.
                unit = reset / max(1, int(limit)) if limit else reset
                self.blocked_until = max(self.blocked_until, time.monotonic() + min(reset, max(unit, 0.001)))


def _duration(text: str | None) -> float | None:
    """OpenAI's reset durations: 1s, 6m0s, 250ms."""
    if not text:
        return None
    m = _DURATION.match(text)
    if not m:
        return None
    h, mins, s, ms = (float(x) if x else 0.0 for x in m.groups())
    return h * 3600 + mins * 60 + s + ms / 1000


def _until(stamp: str | None) -> float | None:
    """Seconds until an RFC 3339 time (Anthropic's resets)."""
    if not stamp:
        return None
    try:
        when = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, when.timestamp() - time.time())


def retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return float(value) * scale
            except ValueError:
                continue
    return None


@dataclass
class LiveRequest:
    custom_id: str
    model: str
    provider: str
    line: dict[str, Any]  # the compiled batch line: {custom_id, ..., body} or {custom_id, params}
    tokens: int  # input plus max output, for the token bucket


class LiveCaller:
    """Sends live requests for one model through its SDK (async client, SDK retries off: the limiter retries)."""

    MAX_RATE_WAITS = 100  # a provider that keeps answering 429 for this long is down, not busy

    def __init__(
        self,
        provider: str,
        creds: Credentials,
        limits: dict[str, Any],
        attempts: int,
        backoff: float = 0.5,
        backoff_max: float = 30.0,
    ) -> None:
        self.provider = provider
        self.limiter = Limiter(limits)
        self.attempts = attempts
        self.backoff, self.backoff_max = backoff, backoff_max
        if provider == "anthropic":
            import anthropic

            self.client: Any = anthropic.AsyncAnthropic(api_key=creds.api_key, base_url=creds.base_url, max_retries=0)
        else:
            import openai

            self.client = openai.AsyncOpenAI(api_key=creds.api_key, base_url=creds.base_url, max_retries=0)

    async def call(self, request: LiveRequest) -> Outcome:
        """Send one request; a 429 waits and goes again without using up an attempt (it says nothing about the
        request), other retryable errors use one each."""
        failures = rate_waits = 0
        while True:
            await self.limiter.acquire(request.tokens)
            try:
                outcome, headers, wait = await self._once(request)
            finally:
                self.limiter.release()
            if headers is not None:
                self.limiter.learn(headers, self.provider)
            if outcome.status == "ok" or not outcome.retryable:
                return outcome
            limited = outcome.error is not None and outcome.error.get("code") == "429"
            if limited and rate_waits < self.MAX_RATE_WAITS:
                rate_waits += 1
            else:
                failures += 1
                if failures >= self.attempts:
                    return outcome
            pause = wait if wait is not None else min(self.backoff_max, self.backoff * 2 ** (failures + rate_waits))
            await asyncio.sleep(pause * (1 + 0.25 * random.random()))  # jitter spreads the herd

    async def _once(self, request: LiveRequest) -> tuple[Outcome, Any, float | None]:
        import anthropic
        import openai

        cid = request.custom_id
        try:
            if self.provider == "anthropic":
                raw = await self.client.messages.with_raw_response.create(**request.line["params"])
                message = (await _parsed(raw)).model_dump(mode="json")
                line = {"custom_id": cid, "result": {"type": "succeeded", "message": message}}
                return parse_anthropic(line), raw.headers, None
            raw = await self.client.chat.completions.with_raw_response.create(**request.line["body"])
            body = (await _parsed(raw)).model_dump(mode="json")
            return parse_openai({"custom_id": cid, "response": {"status_code": 200, "body": body}}), raw.headers, None
        except (openai.APIStatusError, anthropic.APIStatusError) as exc:
            status = exc.status_code
            retryable = status in (408, 409, 429) or status >= 500
            error = {"code": str(status), "message": str(exc.message)[:500]}
            return (
                Outcome(cid, "error", error=error, retryable=retryable),
                exc.response.headers,
                retry_after(exc.response.headers),
            )
        except (openai.APIConnectionError, anthropic.APIConnectionError) as exc:
            return Outcome(cid, "error", error={"code": "connection", "message": str(exc)[:500]}), None, None


async def _parsed(raw: Any) -> Any:
    """The parsed body of a raw response (the SDKs differ on whether parse() is a coroutine)."""
    parsed = raw.parse()
    return await parsed if inspect.isawaitable(parsed) else parsed


async def run_live(
    callers: dict[str, LiveCaller], requests: list[LiveRequest], on_result: Callable[[LiveRequest, Outcome], None]
) -> None:
    """Send every request through its model's caller; ``on_result`` sees each outcome as it arrives."""

    async def one(request: LiveRequest) -> None:
        outcome = await callers[request.model].call(request)
        on_result(request, outcome)

    await asyncio.gather(*(one(r) for r in requests))


def request_tokens(line: dict[str, Any], count: Callable[[str], int]) -> int:
    """Input tokens plus the answer budget of a compiled request line, for pacing."""
    body = line.get("body") or line.get("params") or {}
    text = json.dumps(body.get("messages", [])) + json.dumps(body.get("system", ""))
    budget = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    return count(text) + int(budget)
