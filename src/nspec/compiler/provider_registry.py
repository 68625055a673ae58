"""Providers: everything nspec knows about one kind of API, behind one interface, found through a registry.

A provider holds what is specific to its API, in one module (`runners/providers/<name>.py` for the built-ins): the
rules of its model entries, its request lines and shard limits, its tokenizer, how to read its result lines, its
batch and live I/O, its rate-limit headers, and the mapping of its SDK's exceptions into nspec's error tree
(`nspec.errors`). What is policy — retries, backoff, pacing, the ledger, crash safety — lives in the runners, once.

The registry reads the `nspec.providers` entry-point group: each entry point, named after the `provider/` prefix of
model ids, loads an object with the `Provider` interface. The built-ins register the same way (pyproject.toml), so a
third party adds a provider by publishing a package with such an entry point; docs/providers.md has the recipe.
Entry points are loaded on first use, so a broken plugin only matters to specs that use it.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol
from urllib.parse import urlsplit

from nspec import secrets
from nspec.compiler.prices import Usage
from nspec.errors import AuthenticationFailed, UserError
from nspec.plugins import Registry, named_itself

if TYPE_CHECKING:
    from nspec.compiler.caching import CacheCut, CacheStyle
    from nspec.compiler.tokenizers import Tokenizer
    from nspec.prompt import Prompt

GROUP = "nspec.providers"
OPENAI_CHAT = "openai"  # the request format of OpenAI's batch files, which vLLM's run-batch reads too
# The environment variable that overrides the SDKs' own retry count for control calls (tests set 0).
SDK_RETRIES_ENV = "NSPEC_SDK_MAX_RETRIES"


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


@dataclass(frozen=True)
class Credentials:
    api_key: str
    base_url: str | None
    variable: str | None = None  # where the key came from, to name it when the provider refuses it
    headers: Mapping[str, str] = field(default_factory=dict)  # the entry's extra headers (a gateway's), resolved
    query: Mapping[str, str] = field(default_factory=dict)  # the entry's extra query parameters
    options: Mapping[str, Any] = field(default_factory=dict)  # `Provider.connection` of the entry


class ShardLimits(NamedTuple):
    """The most one batch input file (or create call) may hold."""

    lines: int
    bytes: int


class RateHeaders(NamedTuple):
    """What a response's rate-limit headers say, per budget: the limit per minute and what remains (None: silent)."""

    requests: tuple[int | None, int | None]
    tokens: tuple[int | None, int | None]


# Tokens to allow a model's reasoning at each effort, a short answer included: nspec's own figures (the providers
# publish none; reasoning tokens are billed as output and count against the answer budget). `validate` warns where a
# model's max_tokens is no more than this; a judge that reasons gets this plus its verdict.
REASONING_TOKENS = {"minimal": 512, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768, "max": 65536}


@dataclass(frozen=True)
class Reasoning:
    """How a model reasons, given its entry's params: its reasoning tokens count against the answer budget."""

    how: str  # in words, for messages: "at reasoning_effort medium, its default"
    tokens: int  # what to allow for its reasoning (`REASONING_TOKENS` at its effort, or the budget its params set)
    least: Mapping[str, Any] = field(default_factory=dict)  # params that make it reason least, as its API takes them


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


class Provider(Protocol):
    """Everything specific to one API. See the module docstring; docs/providers.md describes each part."""

    @property
    def name(self) -> str:
        """The `provider/` prefix of its model ids."""
        ...

    @property
    def request_format(self) -> str:
        """Which request lines it writes (`OPENAI_CHAT`, or its own): files of one format are interchangeable."""
        ...

    @property
    def key_variables(self) -> tuple[str, ...]:
        """The environment variables its API key is read from, in order; empty when it needs none."""
        ...

    def entry_key_variables(self, entry: Mapping[str, Any]) -> tuple[str, ...]:
        """The key variables of one model entry (a provider whose hosts differ may read a host's own key)."""
        ...

    def connection(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """What its I/O needs to know of this entry besides the key and address (`Credentials.options`): Azure's
        `api_version`, a batch host's completion window."""
        ...

    @property
    def official_hosts(self) -> tuple[str, ...]:
        """The hosts of the provider's own API: its standard key variables are sent there (or to this machine) only."""
        ...

    def default_base_url(self) -> str | None:
        """Where requests go when a model entry sets no `base_url`: what the SDK uses (its environment variable, else
        the official URL); None for a provider that runs on this machine."""
        ...

    @property
    def package(self) -> str | None:
        """The import name of the SDK its I/O needs (None: it needs none)."""
        ...

    @property
    def install_hint(self) -> str:
        """The command that installs that SDK."""
        ...

    @property
    def lanes(self) -> tuple[str, ...]:
        """How its models can run, in words: `batch`, `live`, `local`, or a condition (`nspec providers` shows it)."""
        ...

    @property
    def token_counts(self) -> str:
        """How its models' tokens are counted unless a spec says otherwise: `exact (...)` or `estimated (...)`."""
        ...

    @property
    def own_tokenizer(self) -> bool:
        """Whether `tokenizer: model` (the model's own tokenizer) is available."""
        ...

    @property
    def priced(self) -> bool:
        """Whether the shipped price table lists its models (a self-hosted server's cannot be)."""
        ...

    @property
    def counts_tokens(self) -> bool:
        """Whether it has a count-tokens endpoint (`count_request`, `token_counter`): `nspec calibrate` uses it."""
        ...

    @property
    def default_concurrency(self) -> int:
        """Live calls at once for a model whose `rate_limits` do not say."""
        ...

    def model_issues(self, entry: Mapping[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
        """What is wrong with a model entry for this provider: (key path inside the entry, message) each."""
        ...

    def takes_prefill(self, entry: Mapping[str, Any]) -> bool:
        """Whether the model continues a final assistant message (a prefill) as the start of its answer."""
        ...

    def prefill_problem(self, entry: Mapping[str, Any], prefill: str) -> str | None:
        """What is wrong with giving this prefill template to the model (a clause: "cannot continue a prefill: ..."),
        or None when its API takes it."""
        ...

    def refused_params(self, entry: Mapping[str, Any]) -> dict[str, str]:
        """The entry's `params` its API refuses for its model (unknown to its request type, or not taken by its
        family or API version), each with why: `validate` refuses them in a model's own params and leaves them out
        where `defaults:` gives them. A param set to null is not sent: it is listed when the API refuses it at some
        value, so the plan can say why it is left out."""
        ...

    def reasoning(self, entry: Mapping[str, Any]) -> Reasoning | None:
        """How the entry's model reasons with its params, or None when it does not."""
        ...

    def mode(self, entry: Mapping[str, Any]) -> str:
        """How the model runs: batch, live, or local (on this machine), given its entry (`mode`, `batch_api`)."""
        ...

    def has_batch(self, entry: Mapping[str, Any]) -> bool:
        """Whether the model can be sent as a batch (at the batch price)."""
        ...

    def takes_flex(self, entry: Mapping[str, Any]) -> bool:
        """Whether the model has a flex tier: live calls at the batch price (`mode: flex`)."""
        ...

    def shard_limits(self, entry: Mapping[str, Any]) -> ShardLimits:
        """The most one batch input file (or create call) of the entry's model may hold."""
        ...

    def tokenizer(self, model: str, setting: str | Mapping[str, Any] | None) -> Tokenizer: ...
    def request_line(
        self,
        entry: Mapping[str, Any],
        custom_id: str,
        prompt: Prompt,
        params: Mapping[str, Any],
        max_tokens: int,
    ) -> dict[str, Any]:
        """The batch input line of ``prompt`` to the model of ``entry`` (its entry in the resolved spec: the id,
        and settings such as `endpoint`), with ``params`` (the entry's, or a judge's) and an answer budget of
        ``max_tokens`` unless the params set one: exactly what is uploaded (and what a live call sends). Every
        turn of a conversation is sent; a prefill the model cannot continue goes at the end of the last user turn
        (`as_sent`)."""
        ...

    def cache_style(self, entry: Mapping[str, Any]) -> CacheStyle | None:
        """How the provider caches the prompts of the entry's model (None: nspec shapes nothing for it)."""
        ...

    def shape_cache(self, line: dict[str, Any], prompt: Prompt, cut: CacheCut) -> dict[str, Any]:
        """One of its request lines, of ``prompt`` (as sent), shaped by ``cut``: the first turn (the one that holds
        the context) split into blocks at the cut's boundaries and marked at its breakpoints, or the group's cache
        key added. Pure."""
        ...

    def request_size(self, line: Mapping[str, Any], count: Callable[[str], int]) -> int:
        """Input tokens (as ``count`` counts them) plus the answer budget of one of its request lines: what the
        provider's token-per-minute limits charge, for pacing live calls."""
        ...

    def structured_output(self, params: Mapping[str, Any], name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` asking for a reply that fits the JSON ``schema``, where the API offers it (judges use it)."""
        ...

    def parse_result(self, line: Mapping[str, Any]) -> Outcome:
        """One line of its batch output, normalised."""
        ...

    def prompt_text(self, line: Mapping[str, Any]) -> str:
        """The texts of one of its request lines as the model reads them, in order (the report's excerpt around a
        needle is cut from it)."""
        ...

    def count_request(self, line: Mapping[str, Any]) -> dict[str, Any] | None:
        """What its count-tokens endpoint is asked to count one of its request lines (the parts that make input
        tokens, nothing else), or None when it has no such endpoint: its counts then stay as its tokenizer makes
        them. Pure; `nspec calibrate` keys the counts it gets by this body."""
        ...

    def batches(self, creds: Credentials) -> BatchClient: ...
    def live(self, creds: Credentials, limits: Mapping[str, Any]) -> LiveClient: ...
    def token_counter(self, creds: Credentials) -> TokenCounter:
        """Its count-tokens endpoint (only where `count_request` gives a body)."""
        ...

    def rate_headers(self, headers: Mapping[str, str]) -> RateHeaders: ...


def as_sent(api: Provider, entry: Mapping[str, Any], prompt: Prompt) -> Prompt:
    """``prompt`` as the entry's model gets it: a prefill it cannot continue appended to the last user turn."""
    if prompt.prefill is None or api.takes_prefill(entry):
        return prompt
    return prompt.folded()


def request_id(line: Mapping[str, Any]) -> str:
    """The id of a request line, whatever its format: `custom_id` (OpenAI's, Anthropic's, Mistral's) or `key`
    (Gemini's). It is the cell's id."""
    found = line.get("custom_id", line.get("key"))
    if not isinstance(found, str):
        raise KeyError("custom_id")
    return found


def model_name(entry: Mapping[str, Any]) -> str:
    """The model's name at its provider: the id without its `provider/` prefix."""
    return str(entry["id"]).split("/", 1)[1]


def message_text(content: Any) -> str:
    """The text of a chat message's content (a string, or a list of text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


# -- the registry ----------------------------------------------------------------------------------------------

PROVIDERS: Registry[Provider] = Registry(
    GROUP,
    "provider",
    "providers",
    named_itself,
    {"gemini": " (Gemini models are google/<model>)", "claude": " (Claude models are anthropic/<model>)"},
)


def provider(name: str) -> Provider:
    """The provider registered as ``name`` (the `provider/` prefix of a model id), loaded on first use."""
    return PROVIDERS.get(name)


def names() -> list[str]:
    """Every registered provider name."""
    return PROVIDERS.names()


@dataclass(frozen=True)
class Destination:
    """Where a model's requests go, and which environment variables its key is read from (the first set wins)."""

    model: str
    url: str | None  # None: nowhere, the model runs on this machine
    key_variables: tuple[str, ...]

    @property
    def host(self) -> str:
        if self.url is None:
            return "this machine"
        parsed = urlsplit(self.url)
        return parsed.netloc or self.url

    def __str__(self) -> str:
        key = " or ".join(self.key_variables) if self.key_variables else "no key"
        return f"{self.model} → {self.host} ({key})"


def destination(entry: Mapping[str, Any]) -> Destination:
    """Where the model entry's requests go and with which key."""
    api = provider(str(entry["id"]).split("/", 1)[0])
    url = entry.get("base_url") or api.default_base_url()
    own = api.entry_key_variables(entry)
    variables = (str(entry["api_key_env"]),) if "api_key_env" in entry else own
    return Destination(str(entry.get("name", entry["id"])), url, variables if own else ())


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, without port) is this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def key_destination_problem(entry: Mapping[str, Any]) -> str | None:
    """Why the model entry may not send its key where its `base_url` points (None if it may): a provider's standard
    key goes only to the provider's own hosts or to this machine; any other host needs `api_key_env` naming the key
    meant for it."""
    if "base_url" not in entry or "api_key_env" in entry:
        return None
    api = provider(str(entry["id"]).split("/", 1)[0])
    variables = api.entry_key_variables(entry)
    if not variables:
        return None
    host = urlsplit(str(entry["base_url"])).hostname or ""
    if is_official(host, api.official_hosts) or is_loopback(host):
        return None
    official = " or ".join(f"*{h}" if h.startswith(".") else h for h in api.official_hosts) or "its own API"
    return (
        f"base_url sends requests to {host}, which is not {api.name}'s API ({official}) nor this machine: the "
        f"standard key ({' or '.join(variables)}) is not sent there; name the key meant for {host} with "
        "api_key_env"
    )


def is_official(host: str, hosts: tuple[str, ...]) -> bool:
    """Whether ``host`` is one of ``hosts`` (a name starting with a dot stands for its subdomains, as
    `.openai.azure.com` for every Azure OpenAI resource)."""
    return any(host == h or (h.startswith(".") and host.endswith(h)) for h in hosts)


def credentials(entry: Mapping[str, Any]) -> Credentials:
    """The key, base URL, extra headers and query of a model entry (`api_key_env`, else its provider's variables);
    a missing key or header variable names what to set, before anything is sent. A standard key is never sent to a
    host that is neither the provider's nor this machine (`key_destination_problem`)."""
    name = str(entry["id"]).split("/", 1)[0]
    api = provider(name)
    label = str(entry.get("name", entry["id"]))
    headers = {}
    for header, value in (entry.get("headers") or {}).items():
        if isinstance(value, Mapping):
            if not os.environ.get(str(value["env"])):
                raise UserError(f"{label}: header {header} is read from {value['env']}, which is not set")
            value = os.environ[str(value["env"])]
            secrets.register(value)  # read from the environment: a secret, cut from every message kept
        headers[str(header)] = str(value)
    query = {str(k): str(v) for k, v in (entry.get("query") or {}).items()}
    base_url = entry.get("base_url") or api.default_base_url()
    variables = api.entry_key_variables(entry)
    if not variables:
        return Credentials("", base_url, None, headers, query, api.connection(entry))
    problem = key_destination_problem(entry)
    if problem is not None:
        raise UserError(f"{label}: {problem}")
    candidates = (str(entry["api_key_env"]),) if "api_key_env" in entry else variables
    found = next((n for n in candidates if os.environ.get(n)), None)
    if found is None:
        raise AuthenticationFailed(name, label, f"no API key for {label}: set {' or '.join(candidates)}")
    secrets.register(os.environ[found])
    return Credentials(os.environ[found], base_url, found, headers, query, api.connection(entry))


def catalog() -> list[dict[str, Any]]:
    """Every registered provider as `nspec providers` shows it: how its models run, the variables its key is read
    from (and which is set; never the key), whether its SDK is installed, and how it counts tokens. A provider that
    fails to load is listed with its error."""
    rows: list[dict[str, Any]] = []
    for name in names():
        try:
            api = provider(name)
        except UserError as exc:
            rows.append({"provider": name, "error": str(exc)})
            continue
        found = next((v for v in api.key_variables if os.environ.get(v)), None)
        package = api.package
        rows.append(
            {
                "provider": name,
                "lanes": list(api.lanes),
                "key_variables": list(api.key_variables),
                "key_set": found,
                "sdk": package,
                "sdk_installed": package is None or importlib.util.find_spec(package) is not None,
                "install": None if package is None else api.install_hint,
                "token_counts": api.token_counts,
            }
        )
    return rows
