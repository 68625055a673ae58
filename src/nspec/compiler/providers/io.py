"""What a provider's batch and live clients take and give: the `Credentials` they are made with, a request's
`Outcome`, a result line that is none (`BadLine`), a batch as last seen (`BatchView`), what rate-limit headers say
(`RateHeaders`), the most one batch may hold (`ShardLimits`); the clients' interfaces (`BatchClient`, `LiveClient`,
`TokenCounter`); and the checks on what a provider sends back (`provider_id`, `counted`)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from nspec.compiler.prices import Usage


@dataclass(frozen=True)
class Credentials:
    """What a provider's clients are made with: a model entry's key, address, extra headers and query, and options."""

    api_key: str
    base_url: str | None
    variable: str | None = None  # where the key came from, to name it when the provider refuses it
    headers: Mapping[str, str] = field(default_factory=dict)  # the entry's extra headers (a gateway's), resolved
    query: Mapping[str, str] = field(default_factory=dict)  # the entry's extra query parameters
    options: Mapping[str, Any] = field(default_factory=dict)  # `Provider.connection` of the entry


@dataclass(frozen=True)
class Outcome:
    """One request's result, normalised across providers."""

    custom_id: str
    status: str  # ok | error | expired | cancelled
    text: str | None = None
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    error: dict[str, Any] | None = None
    retryable: bool = True  # for errors: whether sending again may help
    # Of input_tokens (every prompt token), those read from the prompt cache and those written to it (for five
    # minutes, and for an hour).
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0

    @classmethod
    def ok(cls, custom_id: str, text: str, finish_reason: str | None, usage: Usage) -> Outcome:
        """An answer, with its usage."""
        return cls(
            custom_id,
            "ok",
            text,
            finish_reason,
            usage.input_tokens,
            usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            cache_write_1h_tokens=usage.cache_write_1h_tokens,
        )

    @property
    def usage(self) -> Usage:
        return Usage(
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.cache_write_1h_tokens,
        )


@dataclass(frozen=True)
class BadLine:
    """A line of a provider's result file that is not a well-formed result: its number, the reason, the request id
    where one could be read (that request then counts as missing and is sent again), and the downloaded file, kept
    under the run directory for whoever wants to look."""

    custom_id: str | None
    number: int
    reason: str
    kept: Path

    def __str__(self) -> str:
        return f"line {self.number} of {self.kept}: {self.reason}"


@dataclass(frozen=True)
class BatchView:
    """A provider batch as last seen."""

    batch_id: str
    status: str  # the provider's own word
    ended: bool
    done: int  # requests finished (either way) as far as the provider says
    total: int
    output_files: tuple[str, ...] = ()  # files to download, where the provider has them

    def __post_init__(self) -> None:
        # Read from a provider's answer: a field of the wrong type raises here, inside the call's guard, so it is a
        # malformed response and not a crash further on.
        provider_id(self.batch_id, "batch id")
        for file_id in self.output_files:
            provider_id(file_id, "file id")
        if not isinstance(self.status, str) or not isinstance(self.ended, bool):
            raise TypeError(f"batch status {self.status!r:.80}, ended {self.ended!r:.20}")
        for count in (self.done, self.total):
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise TypeError(f"request count {count!r:.40}")


def counted(*values: Any) -> int:
    """The sum of a batch's request counts as a provider gave them, each that is not a count (missing, negative, not a
    number) taken as 0: they only say how far a batch is, and a wrong one must not hold up its results."""
    return sum(v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0)


# What a provider's id (a batch's, a file's) may look like before nspec puts it in a file name or a URL path: letters,
# digits and `_.:-`, with at most one `/` between two such words (Gemini's `batches/...` and `files/...`).
_PROVIDER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}(?:/[A-Za-z0-9][A-Za-z0-9_.:-]{0,199})?")


def provider_id(value: Any, what: str) -> str:
    """``value`` if it is an id of a safe shape; a ValueError (a malformed response, where a provider's answer is
    read) if not: an id like `/../../x` must never steer a download or a keyed request elsewhere."""
    if isinstance(value, str) and _PROVIDER_ID.fullmatch(value) and ".." not in value:
        return value
    raise ValueError(f"{what} {value!r:.80} is not of a safe shape")


class ShardLimits(NamedTuple):
    """The most one batch input file (or create call) may hold."""

    lines: int
    bytes: int


class RateHeaders(NamedTuple):
    """What a response's rate-limit headers say, per budget: the limit per minute and what remains (None: silent)."""

    requests: tuple[int | None, int | None]
    tokens: tuple[int | None, int | None]


class BatchClient(Protocol):
    """A provider's batch I/O. Every method raises nspec errors (`Refused`, `ProviderError`), never the SDK's, and
    reads what the provider sends as untrusted input (`nspec.runners.providers.guard`)."""

    # Whether `find` matches a shard's batches exactly (by metadata this folder wrote, or by the file it uploaded):
    # a second match is then a surplus batch of ours, cancelled; otherwise it may be anyone's, and is left alone.
    finds_exactly: bool

    def upload(self, shard: Path) -> str: ...
    def create(self, file_id: str, shard: Path, metadata: dict[str, str]) -> str: ...
    def find(self, metadata: dict[str, str], after: float) -> list[tuple[str, float]]:
        """Batches that may be this shard's, created after ``after`` (Unix seconds, less the clock skew the provider
        allows for), each with its creation time: how a create call interrupted before its batch id was recorded is
        found again. Create calls are not retried by the SDK (a lost answer may have made a batch): the runner finds
        and adopts one, and cancels the rest."""
        ...

    def poll(self, batch_id: str) -> BatchView: ...
    def failure(self, batch_id: str) -> str:
        """Why a batch failed as a whole."""
        ...

    def download(self, view: BatchView, folder: Path) -> Iterator[Outcome | BadLine]:
        """The batch's results, a line at a time, each an `Outcome` or, where the provider wrote something that is
        no result, a `BadLine` (the other lines are still read)."""
        ...

    def cancel(self, batch_id: str) -> None: ...


class LiveClient(Protocol):
    """A provider's live calls, in one event loop."""

    async def send(self, line: dict[str, Any]) -> tuple[Outcome, Mapping[str, str] | None]:
        """Send one compiled request line; return its outcome and the response headers. A request-level failure
        is an error outcome; a refusal of the model's calls raises `Refused`; a transient failure raises
        `ProviderError` (the caller waits and retries)."""
        ...

    async def close(self) -> None: ...


class TokenCounter(Protocol):
    """A provider's count-tokens endpoint (free to call): what `nspec calibrate` asks."""

    def count(self, body: dict[str, Any]) -> int:
        """The input tokens of ``body`` (a `Provider.count_request`). Raises nspec's errors: `Refused` for a key,
        model or request the provider refuses, `ProviderError` for what trying again may fix."""
        ...
