"""The spec's models as compiling sees them: each with its provider, tokenizer, params and prompt overrides, and
the slots their cells are made in."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nspec.compiler.providers.contract import Provider
from nspec.compiler.providers.registry import provider as provider_api
from nspec.prompt import Prompt

from .caching import CachePolicy, cache_policy
from .counts_file import Counter, CountsFile, Fetch, ModelCounts
from .haystack import TokenizedText
from .tasks import Task
from .tokenizers import Tokenizer


@dataclass
class Model:
    """A model entry of the resolved spec, with what compiling needs of it."""

    label: str
    model_id: str
    provider: str
    name: str
    mode: str
    params: dict[str, Any]
    max_context: int | None
    tokenizer: Tokenizer
    prompt_override: dict[str, Any]
    entry: dict[str, Any] = field(repr=False)
    api: Provider = field(repr=False)  # what its provider knows: request lines, limits, modes
    counter: Counter | None = field(default=None, repr=False)  # the provider's counts, once calibrated
    cache: CachePolicy | None = None  # how its requests are shaped for the provider's prompt cache

    def count(self, text: str) -> int:
        """``text``'s tokens as this model counts them (its tokenizer's, scaled where it is a proxy)."""
        return self.tokenizer.scale(self.tokenizer.own_count(text))

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "-", self.label).strip("-")[:40] or "model"

    def fit_target(self, length: int, reserve: int) -> int:
        """The length a cell is fitted to: the grid's, or less for a model counted by a proxy whose real count may be
        up to its tokenizer's margin higher, so that the real prompt still fits the model's max_context."""
        margin = self.tokenizer.margin
        if self.max_context is None or not margin:
            return length
        return min(length, int((self.max_context - reserve) / (1 + margin)) + reserve)

    def prompt_tokens(self, prompt: Prompt, within: int | None = None) -> tuple[int, bool]:
        """A whole prompt's tokens as the model counts them — the provider's count where calibrate has it — and
        whether the count is exact. With ``within``, a prompt whose characters alone hold more tokens than that
        (`Tokenizer.fewest`) is not tokenised: that floor is returned, inexact (a published row of 60 MB is refused
        by its length, never held as tokens)."""
        if self.counter is not None:
            known = self.counter.prompt(prompt)
            if known is not None:
                return known, True
        tokenizer = self.tokenizer
        texts = prompt.texts()
        if within is not None:
            fewest = tokenizer.fewest(sum(map(len, texts)))
            if fewest > within:
                return fewest, False
        own = tokenizer.framing(len(texts), prompt.prefill is not None) + sum(tokenizer.own_count(t) for t in texts)
        return tokenizer.scale(own), tokenizer.exact

    def max_tokens(self, reserve: int) -> Any:
        """The answer budget its requests ask for: its params' own, else the cell's reserve."""
        return self.params.get("max_tokens", self.params.get("max_completion_tokens", reserve))


def models_of(
    spec: Mapping[str, Any], counts: CountsFile | None = None, fetch: dict[str, Fetch] | None = None
) -> list[Model]:
    """The spec's models; a model whose provider counts tokens gets a `Counter` when ``counts`` has its counts
    (compile) or ``fetch`` a way to ask for them (calibrate)."""
    out = []
    for entry in spec["models"]:
        provider, name = entry["id"].split("/", 1)
        api = provider_api(provider)
        params = dict(entry.get("params", {}))
        counter = None
        if api.counts_tokens and ((counts and entry["id"] in counts.models) or (fetch and entry["id"] in fetch)):
            known = (counts.models.get(entry["id"]) if counts else None) or ModelCounts(f"{provider} count_tokens")
            counter = Counter(api, entry, params, known, (fetch or {}).get(entry["id"]))
        out.append(
            Model(
                cache=cache_policy(spec.get("cache"), entry, api),
                label=entry.get("name", entry["id"]),
                model_id=entry["id"],
                provider=provider,
                name=name,
                mode=entry.get("mode", "auto"),
                params=params,
                max_context=entry["max_context"] if "max_context" in entry else api.context_window(entry),
                tokenizer=api.tokenizer(entry.get("base_model", name), entry.get("tokenizer")),
                prompt_override=dict(entry.get("prompt", {})),
                entry=entry,
                api=api,
                counter=counter,
            )
        )
    return out


def prompt_variants(spec: Mapping[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
    """The spec's prompt variants, each with its name (None: the spec has one prompt)."""
    if "prompts" in spec:
        return [(p["name"], p) for p in spec["prompts"]]
    return [(None, spec.get("prompt", {}))]  # a family that writes its own prompt needs none


def model_prompt(prompt: Mapping[str, Any], model: Model) -> dict[str, Any]:
    """A prompt variant with the model's overrides (an override of None removes the field)."""
    return {k: v for k, v in {**prompt, **model.prompt_override}.items() if v is not None}


def cell_id(model: Model, identity: Mapping[str, Any]) -> str:
    """Deterministic from the cell's identity; also the custom_id (^[A-Za-z0-9_-]{1,64}$)."""
    whole = {"model": model.label, **identity}
    digest = hashlib.sha256(json.dumps(whole, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return f"{model.slug}-{digest[:16]}"


@dataclass(frozen=True)
class ModelSlot:
    """What every cell of one model, prompt variant, length, trial and `grid.params` point shares."""

    model: Model
    variant: str | None
    prompt: dict[str, Any]  # the variant with the model's overrides
    length: int
    trial: int
    point: dict[str, Any]  # the `grid.params` point
    task: Task
    haystack: TokenizedText | None = None  # the trial's tokenised haystack (families whose drafts are `Fill`)
    start: int = 0  # the trial's first haystack token

    @property
    def tt(self) -> TokenizedText:
        assert self.haystack is not None, "a Fill draft of a family that reads no haystack"
        return self.haystack

    @property
    def reserve(self) -> int:
        """The answer budget its prompt sets."""
        reserve: int = self.prompt.get("reserve_tokens", 300)
        return reserve
