"""Live runs: one call per request, paced so the provider's limits are never hit when they are known; every model's
requests go at the same time, each model within its own limits.

Per model, a limiter holds a concurrency cap and token buckets for requests and tokens per minute (input plus the
request's max_tokens), from the spec's `rate_limits`. The rate-limit headers of every response tighten it further:
when a provider says a budget is spent, calls wait for its reset instead of provoking a 429. A 429 or a 5xx is
retried after `retry-after-ms` / `retry-after` when given (a finite, non-negative number of seconds or an HTTP date;
anything else is ignored), else after an exponential backoff with jitter; waits of a second or more are said.

A 429 is never a request's final result: it says nothing about the request. A model that answers 429 for longer than
a run waits — asked to wait more than `RETRY_AFTER_CAP`, or `MAX_RATE_WAITS` 429s in a row — or fails
`BREAKER` calls in a row (5xx, connections cut) is closed for the rest of the call: its requests stay pending, the
reason is said, and the next run continues. Each result is appended as it arrives, so a crash loses only the
requests in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from nspec import interrupt
from nspec.compiler.providers.io import Credentials, Outcome, RateHeaders
from nspec.compiler.providers.registry import provider
from nspec.compiler.tokenizers import encoding
from nspec.errors import ProviderError, RateLimited, UserError
from nspec.runners.providers import RETRY_AFTER_CAP


@dataclass
class Bucket:
    """A per-minute budget spent evenly: it holds half a second's worth, so requests spread over the minute instead
    of bursting a minute's budget at once (providers enforce limits over short windows too)."""

    per_minute: float | None
    level: float = 0.0
    stamp: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.level = 1.0  # no opening burst: new connections bunch the first requests on arrival

    @property
    def capacity(self) -> float:
        return max(1.0, (self.per_minute or 0) / 120)

    def delay(self, amount: float) -> float:
        """Seconds to wait before ``amount`` fits (and takes it when it does)."""
        if self.per_minute is None:
            return 0.0
        now = time.monotonic()
        rate = self.per_minute / 60
        self.level = min(max(self.capacity, amount), self.level + (now - self.stamp) * rate)
        self.stamp = now
        if self.level >= amount:
            self.level -= amount
            return 0.0
        return (amount - self.level) / rate


MARGIN = 0.98  # pace a little under a limit, so clock jitter between us and the provider never costs a 429


MAX_SLOTS = 1024  # calls in flight to one model, at most, however fast its limits and slow its answers
PREFETCH = 64  # a model's requests read ahead of its free slots, ready when one frees (each holds its prompt)


class Limiter:
    """Pacing of one model's live calls. ``adaptive``: the calls in flight follow Little's law — the rate the limits
    allow times the latency observed — instead of the fixed ``concurrency``, which is then where they start."""

    def __init__(self, limits: dict[str, Any], adaptive: bool = False) -> None:
        self.capacity = int(limits.get("concurrency", 8))
        self.slots = asyncio.Semaphore(self.capacity)
        self.adaptive = adaptive
        self.retiring = 0  # slots to give up as they are released (the cap came down while they were in use)
        self.latency: float | None = None  # seconds a call takes, smoothed
        self.requests = Bucket(_paced(limits.get("requests_per_minute")))
        self.tokens = Bucket(_paced(limits.get("tokens_per_minute")))
        # The tokens-per-minute limit as given (the spec's, else the provider's headers'), and who gave it.
        self.token_limit: tuple[int, str] | None = None
        if limits.get("tokens_per_minute") is not None:
            self.token_limit = (int(limits["tokens_per_minute"]), "rate_limits.tokens_per_minute")
        self.blocked_until = 0.0  # a budget is spent (headers) or the provider asked us to wait (429) until then
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
        if self.retiring:  # the slot is given up instead of handed on: the cap came down
            self.retiring -= 1
        else:
            self.slots.release()

    def observe(self, seconds: float, tokens: int) -> None:
        """A call of ``tokens`` took ``seconds``: with adaptive slots, follow what keeps the limits busy — up when
        calls take longer, down when they come back faster (a slow start must not hold a thousand connections
        open for the rest of the run)."""
        self.latency = seconds if self.latency is None else 0.8 * self.latency + 0.2 * seconds
        if not self.adaptive:
            return
        rates = []  # calls per second the limits allow
        if self.requests.per_minute:
            rates.append(self.requests.per_minute / 60)
        if self.tokens.per_minute and tokens:
            rates.append(self.tokens.per_minute / 60 / tokens)
        if not rates:
            return
        want = min(MAX_SLOTS, math.ceil(min(rates) * self.latency * 1.5) + 1)
        while self.capacity < want:  # a slot added as one released is (a retirement still due is called off first)
            self.release()
            self.capacity += 1
        if self.capacity > want:  # slots in use are retired as they come back
            self.retiring += self.capacity - want
            self.capacity = want

    def learn(self, said: RateHeaders) -> None:
        """Adopt the provider's limits when the spec gave none, and pause when a budget is spent."""
        for bucket_name, (limit, remaining) in (("requests", said.requests), ("tokens", said.tokens)):
            if not limit:
                continue
            bucket: Bucket = getattr(self, bucket_name)
            if bucket.per_minute is None:
                setattr(self, bucket_name, Bucket(_paced(limit)))
                if bucket_name == "tokens":
                    self.token_limit = (limit, "the provider's rate-limit headers")
            if remaining is not None and remaining <= 0:
                # Spent: one unit of a per-minute budget comes back every 60 / limit seconds.
                self.pause(60 / max(1, limit))

    def pause(self, seconds: float) -> None:
        self.blocked_until = max(self.blocked_until, time.monotonic() + seconds)
        # What accumulates during a pause must not go out as one burst into a provider that just said "wait".
        self.requests.level = min(self.requests.level, 1.0)
        self.tokens.level = min(self.tokens.level, self.tokens.capacity / 4)


def _paced(per_minute: Any) -> float | None:
    return None if per_minute is None else float(per_minute) * MARGIN


@dataclass
class LiveRequest:
    custom_id: str
    model: str
    provider: str
    line: dict[str, Any]  # the compiled batch line: {custom_id, ..., body} or {custom_id, params}
    tokens: int  # input plus max output, for the token bucket


class LiveCaller:
    """Sends one model's live requests through its provider's live client, paced by its limiter: the policy of
    retries is here, the protocol in the provider."""

    MAX_RATE_WAITS = 100  # 429s in a row, across the model's calls: it is down or out of quota, not busy
    BREAKER = 25  # other transient failures in a row, across the model's calls: it is down for now
    SAY_EVERY = 5.0  # seconds between two reports of a wait

    def __init__(
        self, settings: CallerSettings, on_wait: Callable[[str, float, str], None], backoff_max: float = 30.0
    ) -> None:
        self.api = provider(settings.provider)
        adaptive = "concurrency" not in settings.limits
        self.limiter = Limiter({"concurrency": self.api.default_concurrency, **settings.limits}, adaptive)
        self.attempts = settings.attempts
        self.backoff, self.backoff_max = settings.backoff, backoff_max
        self.client = self.api.live(settings.creds, settings.limits)
        self.on_wait = on_wait
        self.rate_limited = 0  # 429s received
        self.rate_streak = self.failure_streak = 0  # 429s and other transient failures since the last answer
        self.closed: str | None = None  # why no more calls are made to the model in this run
        self.said = -math.inf  # when a wait was last reported

    async def close(self) -> None:
        await self.client.close()

    async def call(self, request: LiveRequest) -> Outcome | None:
        """Send one request. A 429 waits and goes again without using up an attempt (it says nothing about the
        request), other transient failures use one each. None when the model was closed for this run (see the
        module's doc): the request is left pending. A refusal (a wrong key, an unknown model) raises: nothing more is
        sent for the model, and nothing is recorded as the request's answer."""
        failures = waits = 0  # this request's: its backoff grows with them (the streaks are the model's)
        while self.closed is None:
            check_admissible(request, self.limiter.token_limit)
            await self.limiter.acquire(request.tokens)
            if self.closed is not None:  # closed while this call waited its turn
                self.limiter.release()
                break
            sent = time.monotonic()
            try:
                outcome, headers = await self.client.send(request.line)
                self.limiter.observe(time.monotonic() - sent, request.tokens)
            except ProviderError as exc:
                limited = isinstance(exc, RateLimited)
                wait = exc.retry_after if isinstance(exc, RateLimited) else None
                if isinstance(exc, RateLimited) and exc.headers is not None:
                    self.limiter.learn(self.api.rate_headers(exc.headers))  # a 429 says the limits too
                code = str(exc.status) if exc.status is not None else "connection"
                outcome, headers = Outcome(request.custom_id, "error", error={"code": code, "message": str(exc)}), None
            else:
                limited, wait = False, None
            finally:
                self.limiter.release()
            if headers is not None:
                self.limiter.learn(self.api.rate_headers(headers))
            if outcome.status == "ok" or not outcome.retryable:
                self.rate_streak = self.failure_streak = 0
                return outcome
            if limited:
                self.rate_limited += 1
                self.rate_streak += 1
                waits += 1
                if wait is not None and wait > RETRY_AFTER_CAP:
                    self.closed = (
                        f"{request.model}: rate limited, and asked to wait {wait:,.0f}s, more than a run waits "
                        f"({RETRY_AFTER_CAP:.0f}s); run again later"
                    )
                elif self.rate_streak >= self.MAX_RATE_WAITS:
                    self.closed = f"{request.model}: rate limited {self.rate_streak} times in a row; run again later"
                if wait is not None:
                    self.limiter.pause(wait)  # the provider asked every request of this model to wait
            else:
                self.failure_streak += 1
                failures += 1
                if self.failure_streak >= self.BREAKER:
                    self.closed = (
                        f"{request.model}: {self.failure_streak} calls in a row failed, the last: "
                        f"{(outcome.error or {}).get('message')}; run again later"
                    )
                elif failures >= self.attempts:
                    return outcome
            if self.closed is not None:
                break
            pause = wait if wait is not None else min(self.backoff_max, self.backoff * 2 ** (failures + waits))
            pause *= 1 + 0.25 * random.random()  # jitter spreads the herd
            self._say(request.model, pause, "rate limited (429)" if limited else f"{outcome.error}")
            await asyncio.sleep(pause)
        return None

    def _say(self, model: str, seconds: float, why: str) -> None:
        now = time.monotonic()
        if seconds >= 1.0 and now - self.said >= self.SAY_EVERY:
            self.said = now
            self.on_wait(model, seconds, why)


def check_admissible(request: LiveRequest, token_limit: tuple[int, str] | None) -> None:
    """A request larger than a tokens-per-minute limit can never be sent (a provider refuses it every minute):
    say so and stop, instead of waiting on it."""
    if token_limit is not None and request.tokens > token_limit[0]:
        limit, source = token_limit
        raise UserError(
            f"{request.model}: a request needs {request.tokens:,} tokens (its input plus max_tokens), more than the "
            f"tokens-per-minute limit of {limit:,} ({source}), so it can never be sent: raise the limit, or shorten "
            "the longest context lengths"
        )


@dataclass(frozen=True)
class CallerSettings:
    """What a model's live caller needs; callers (and their async clients) live inside one event loop."""

    provider: str
    creds: Credentials
    limits: dict[str, Any]
    attempts: int
    backoff: float = 0.5


@dataclass
class LiveReport:
    """What a `run_live` call met: 429s received, and the models closed for the rest of it, with why."""

    rate_limited: int = 0
    closed: dict[str, str] = field(default_factory=dict)


async def run_live(
    settings: dict[str, CallerSettings],
    requests: Mapping[str, Iterable[LiveRequest]],
    on_result: Callable[[LiveRequest, Outcome], None],
    stop: Callable[[], bool] = lambda: False,
    on_wait: Callable[[str, float, str], None] = lambda model, seconds, why: None,
) -> LiveReport:
    """Send each model's requests (``requests``: model → its requests, in their sending order) through its caller,
    every model at once; ``on_result`` sees each outcome as it arrives, ``on_wait`` each wait of a second or more
    (now and then). A model's requests are taken as its slots free up (a few more than can be in flight wait their
    turn), so a run of any size holds only those; they are read in a thread, off the event loop (reading the first
    may take long: a local model's sorts them all first). A refusal stops the run: requests still in flight are
    abandoned unrecorded. Once ``stop()`` is true no request is sent any more (those in flight come back and are
    recorded); the requests of a model closed for this run (see the module's doc) are left pending. When the user
    asks to stop (`nspec.interrupt`), the requests in flight are dropped unrecorded within a fraction of a second,
    and `Interrupted` is raised."""
    with interrupt.watching():
        sending = asyncio.ensure_future(_send_all(settings, requests, on_result, stop, on_wait))
        watcher = asyncio.ensure_future(_until_interrupted())
        await asyncio.wait({sending, watcher}, return_when=asyncio.FIRST_COMPLETED)
        watcher.cancel()
        if not sending.done():
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
            raise interrupt.Interrupted("live requests stopped")
        return sending.result()


async def _until_interrupted() -> None:
    while not interrupt.requested():
        await asyncio.sleep(0.1)


async def _send_all(
    settings: dict[str, CallerSettings],
    requests: Mapping[str, Iterable[LiveRequest]],
    on_result: Callable[[LiveRequest, Outcome], None],
    stop: Callable[[], bool],
    on_wait: Callable[[str, float, str], None],
) -> LiveReport:
    callers = {label: LiveCaller(settings[label], on_wait) for label in requests}
    # A thread per model reads its requests. Not the loop's default executor: `asyncio.run` waits for that one at
    # its end, and a stop (Ctrl-C) must not wait for a read under way.
    reader = ThreadPoolExecutor(max(1, len(requests)), thread_name_prefix="nspec-read")
    senders = [
        asyncio.ensure_future(_send_model(callers[label], source, reader, on_result, stop))
        for label, source in requests.items()
    ]
    try:
        for sender in asyncio.as_completed(senders):
            await sender  # a refusal raises at once
    finally:
        for sender in senders:
            sender.cancel()
        await asyncio.gather(*senders, return_exceptions=True)
        reader.shutdown(wait=False, cancel_futures=True)
        for caller in callers.values():
            await caller.close()
    closed = {label: c.closed for label, c in callers.items() if c.closed is not None}
    return LiveReport(sum(c.rate_limited for c in callers.values()), closed)


async def _send_model(
    caller: LiveCaller,
    requests: Iterable[LiveRequest],
    reader: ThreadPoolExecutor,
    on_result: Callable[[LiveRequest, Outcome], None],
    stop: Callable[[], bool],
) -> None:
    """Send one model's requests, at most its slots' worth and `PREFETCH` more taken at a time."""
    loop = asyncio.get_running_loop()
    source = iter(requests)

    async def one(request: LiveRequest) -> None:
        if stop():
            return
        outcome = await caller.call(request)
        if outcome is not None:
            on_result(request, outcome)

    tasks: set[asyncio.Future[None]] = set()
    ended: list[asyncio.Future[None]] = []  # tasks done since the last look (a refusal raises from its result)
    room = asyncio.Event()

    def end(task: asyncio.Future[None]) -> None:
        tasks.discard(task)
        ended.append(task)
        room.set()

    try:
        while True:
            while ended:
                ended.pop().result()
            if caller.closed is not None or stop():
                break
            # More are read once half of those read ahead are gone: one trip to the reader for many requests.
            # Waiting for any of a thousand tasks with asyncio.wait costs a callback on each, every time: instead
            # each task says when it ends.
            if len(tasks) > caller.limiter.capacity + PREFETCH // 2:
                room.clear()
                await room.wait()
                continue
            taken = await loop.run_in_executor(reader, _take, source, caller.limiter.capacity + PREFETCH - len(tasks))
            if not taken:
                break
            for request in taken:
                sending = asyncio.ensure_future(one(request))
                tasks.add(sending)
                sending.add_done_callback(end)
        await asyncio.gather(*tasks)
        for finished in ended:
            finished.result()
    finally:
        for task in list(tasks):
            task.cancel()


def _take(source: Iterator[LiveRequest], count: int) -> list[LiveRequest]:
    return list(itertools.islice(source, count))


def request_tokens(provider_name: str, line: Mapping[str, Any]) -> int:
    """Input tokens plus the answer budget of a compiled request line, for pacing (counted with o200k: a proxy
    where the provider counts its own way, close enough to keep under a per-minute budget)."""
    return provider(provider_name).request_size(line, encoding("o200k_base").count)
