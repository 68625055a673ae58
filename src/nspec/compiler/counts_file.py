"""Token counts from a provider's count-tokens endpoint, for models whose tokenizer nspec does not have (Claude,
Gemini): what `nspec calibrate` asks for and keeps beside the spec, and what the compiler reads to fit and count
those models' cells exactly.

A count is of a whole request as the provider counts it (`Provider.count_request` of a request line), keyed by the
SHA-256 of that body, so a count can never be applied to any other text. The compiler asks for three kinds (see
`compiler.count_fitting`): the slot's skeleton (templates and haystack, no question, no needles), small "minis" (the
templates around a few sentences of the haystack, with and without a cell's needles and question), and, to verify,
whole cells. The file (`<spec>.counts.json`, schemas/counts.v1.json):

    {"nspec_counts": 1,
     "models": {"anthropic/claude-sonnet-4-5": {"counted_by": "anthropic count_tokens",
                                                "composition": "verified",
                                                "counts": {"<sha256>": 1234, ...}}}}

`composition` says whether the cells' counts composed from skeletons and minis agreed with whole-cell counts
(`verified`), did not (`rejected`: then only whole-cell counts are exact), or were not checked (`unchecked`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nspec.compiler.providers.contract import Provider
from nspec.prompt import Prompt

COUNTS_VERSION = 1
COUNTS_SUFFIX = ".counts.json"
COMPOSITIONS = ("verified", "rejected", "unchecked")


def request_key(body: Mapping[str, Any]) -> str:
    """The key of a count: the SHA-256 of the count request's canonical JSON."""
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    ).hexdigest()


@dataclass
class ModelCounts:
    """One model's counts."""

    counted_by: str
    composition: str = "unchecked"
    counts: dict[str, int] = field(default_factory=dict)

    def digest(self) -> str:
        """What the compile hash takes of these counts: the compiled cells depend on them."""
        return hashlib.sha256(
            json.dumps([self.composition, sorted(self.counts.items())], separators=(",", ":")).encode()
        ).hexdigest()

    def as_dict(self) -> dict[str, Any]:
        return {
            "counted_by": self.counted_by,
            "composition": self.composition,
            "counts": dict(sorted(self.counts.items())),
        }


@dataclass
class CountsFile:
    models: dict[str, ModelCounts] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CountsFile:
        """From a file's JSON, already valid against schemas/counts.v1.json."""
        return cls(
            {
                model: ModelCounts(entry["counted_by"], entry.get("composition", "unchecked"), dict(entry["counts"]))
                for model, entry in data["models"].items()
            }
        )

    def as_dict(self) -> dict[str, Any]:
        return {"nspec_counts": COUNTS_VERSION, "models": {m: c.as_dict() for m, c in sorted(self.models.items())}}


Fetch = Callable[[dict[str, Any]], int]


class Counter:
    """The provider's counts of one model's requests: looked up in its `ModelCounts`, or, when calibrating, asked of
    the provider through ``fetch`` (the compiler itself never does I/O: calibrate passes the function in). Counts
    used are kept in `used`, so that calibrate writes exactly what the compile needs."""

    def __init__(
        self,
        api: Provider,
        entry: Mapping[str, Any],
        params: Mapping[str, Any],
        known: ModelCounts,
        fetch: Fetch | None = None,
    ) -> None:
        self.api, self.entry, self.params, self.known, self.fetch = api, entry, params, known, fetch
        self.used: dict[str, int] = {}
        self.missing = 0  # lookups that found no count (compile without calibrate)

    @property
    def composes(self) -> bool:
        """Whether counts composed from skeletons and minis are a cell's count (not refuted by whole counts)."""
        return self.known.composition != "rejected"

    def prompt(self, prompt: Prompt) -> int | None:
        """The count of a request of ``prompt`` (with the model's parameters), or None when unknown."""
        return self.line(self.api.request_line(self.entry, "count", prompt, self.params, 1))

    def line(self, line: Mapping[str, Any]) -> int | None:
        """The count of a request line (asked for when calibrating), or None when unknown."""
        body = self.api.count_request(line)
        if body is None:
            return None
        key = request_key(body)
        found = self.known.counts.get(key)
        if found is None and self.fetch is not None:
            found = self.known.counts[key] = self.fetch(body)
        if found is None:
            self.missing += 1
            return None
        self.used[key] = found
        return found

    def known_line(self, line: Mapping[str, Any]) -> int | None:
        """The count of a request line if it is known (never asked for)."""
        body = self.api.count_request(line)
        found = None if body is None else self.known.counts.get(request_key(body))
        if found is not None and body is not None:
            self.used[request_key(body)] = found
        return found
