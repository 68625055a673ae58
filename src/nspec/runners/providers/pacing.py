"""A floor under how slowly a response's body may arrive.

HTTP clients time out a read that gets nothing, not a body that trickles in — a byte every few seconds, each read in
time — and a gateway doing that would hold a run for days (`--max-wait` is checked between rounds). Every SDK
client nspec builds for OpenAI's and Anthropic's APIs (and those that share their SDK's make) reads bodies through
`Paced`: once `GRACE_SECONDS` have passed since the headers, a body that has come at less than
`FLOOR_BYTES_PER_SECOND` on average is cut with the HTTP library's own read timeout, which the SDKs and nspec treat
as a connection that failed (tried again).
"""

from __future__ import annotations

import functools
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import ModuleType
from typing import Any

GRACE_SECONDS = 60.0
FLOOR_BYTES_PER_SECOND = 1024.0


def _check(http: ModuleType, started: float, got: int) -> None:
    elapsed = time.monotonic() - started
    if elapsed > GRACE_SECONDS and got < FLOOR_BYTES_PER_SECOND * (elapsed - GRACE_SECONDS):
        raise http.ReadTimeout(f"the response's body came at {got / elapsed:,.0f} bytes a second: cut as too slow")


def hooks(http: ModuleType) -> dict[str, list[Callable[[Any], None]]]:
    """Event hooks for a sync client of ``http`` (httpx, or a fork with its interface) that pace every body."""

    class Paced(http.SyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __iter__(self) -> Iterator[bytes]:
            started, got = time.monotonic(), 0
            for chunk in self.inner:
                got += len(chunk)
                _check(http, started, got)
                yield chunk

        def close(self) -> None:
            self.inner.close()

    def pace(response: Any) -> None:
        response.stream = Paced(response.stream)

    return {"response": [pace]}


def async_hooks(http: ModuleType) -> dict[str, list[Callable[[Any], Awaitable[None]]]]:
    """The same for an async client."""

    class Paced(http.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __aiter__(self) -> AsyncIterator[bytes]:
            started, got = time.monotonic(), 0
            async for chunk in self.inner:
                got += len(chunk)
                _check(http, started, got)
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    async def pace(response: Any) -> None:
        response.stream = Paced(response.stream)

    return {"response": [pace]}


def http_client(sdk: ModuleType, is_async: bool) -> Any:
    """The SDK's default HTTP client (its `DefaultHttpxClient`, or the async one), pacing every body. Its TLS
    settings are made once per process (loading the system's certificates takes about 20 ms, and a live run makes a
    client per 64 calls in flight)."""
    http = http_module(sdk)
    if is_async:
        return sdk.DefaultAsyncHttpxClient(event_hooks=async_hooks(http), verify=_tls(http))
    return sdk.DefaultHttpxClient(event_hooks=hooks(http), verify=_tls(http))


@functools.cache
def _tls(http: ModuleType) -> ssl.SSLContext:
    context: ssl.SSLContext = http.create_ssl_context()
    return context


def http_module(sdk: ModuleType) -> ModuleType:
    """The HTTP library the SDK is built on (`httpx2` from anthropic 2.x, else `httpx`)."""
    base = __import__(f"{sdk.__name__}._base_client", fromlist=["_"])
    found: ModuleType = getattr(base, "httpx2", None) or base.httpx
    return found
