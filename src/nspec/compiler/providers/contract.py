"""The provider contract: the `Provider` interface every provider implements (docs/providers.md describes each part),
and what the compiler asks of a provider besides its request lines — how it caches prompts (`CacheStyle`, shaped per
cell by a `CacheCut`), how a model reasons (`Reasoning`), and the prompt as the model gets it (`as_sent`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from nspec.compiler.providers.io import (
        BatchClient,
        Credentials,
        LiveClient,
        Outcome,
        RateHeaders,
        ShardLimits,
        TokenCounter,
    )
    from nspec.compiler.tokenizers import Tokenizer
    from nspec.prompt import Prompt

OPENAI_CHAT = "openai"  # the request format of OpenAI's batch files, which vLLM's run-batch reads too
Style = Literal["breakpoints", "prefix"]


@dataclass(frozen=True)
class CacheStyle:
    """How a provider caches prompts for one model."""

    kind: Style
    minimum: int  # the fewest tokens a cached prefix holds (below it nothing is cached)
    granularity: int = 1  # cached prefixes grow in steps of this many tokens past the minimum
    key: bool = False  # the request can carry a cache key that routes a group to the same cache


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


class Provider(Protocol):
    """Everything specific to one API; docs/providers.md describes each part."""

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

    def context_window(self, entry: Mapping[str, Any]) -> int | None:
        """The model's context window where the provider knows it for certain (a local model's trained context, in
        its file), else None: the entry's `max_context` says it. It stands for `max_context` where the entry sets
        none: a grid length past it is refused, or its cells dropped, alike."""
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

    def send_key(self, line: Mapping[str, Any]) -> bytes | None:
        """Where one of its live request lines goes in its model's sending order: None sends it as compiled (before
        any keyed line); lines with keys are sent in the keys' order. An engine that keeps the cache of the prompt
        before gives prompts sharing a prefix keys that sort together, so the shared part is read once."""
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

    def model_names(self, creds: Credentials) -> frozenset[str] | None:
        """The models it serves, from its free list of them (None: no list nspec reads)."""
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
