"""Emulator settings: timing of batch lifecycles, provider limits, live rate limits, the responder, and faults.

A config file (YAML or JSON) has the same sections as `EmulatorConfig`; unknown keys are errors.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from nspec.errors import UserError


@dataclass
class Timing:
    """Batch lifecycle durations in seconds. The defaults finish a batch of thousands within seconds."""

    validate_seconds: float = 0.2
    seconds_per_request: float = 0.0002
    finalize_seconds: float = 0.2
    cancel_seconds: float = 0.2
    completion_window_seconds: float = 24 * 3600
    live_latency_seconds: float = 0.0  # how long every live call takes to answer
    # The longest one look at a batch (a poll, or the worker between polls) answers for, so that a poll comes back in
    # about this long however far the clock has run ahead of the answering; null: a look answers all it reached (a
    # test's stepped clock, where what a poll shows must not depend on the machine's speed).
    look_seconds: float | None = 0.5

    @classmethod
    def realistic(cls) -> Timing:
        """Durations like a busy real service: minutes to validate and finalize, seconds per request."""
        return cls(validate_seconds=120, seconds_per_request=1.5, finalize_seconds=180, cancel_seconds=60)


@dataclass
class Limits:
    openai_max_lines: int = 50_000
    openai_max_bytes: int = 200 * 1000 * 1000
    azure_max_lines: int = 100_000  # learn.microsoft.com/azure/ai-foundry/openai/how-to/batch: 100,000 per file
    anthropic_max_requests: int = 100_000
    anthropic_max_bytes: int = 256 * 1000 * 1000


@dataclass
class RateLimits:
    """Live-call limits per provider; None is unlimited (the headers then report a large limit)."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    # Providers enforce limits over shorter windows than a minute (a burst allowance); the bucket holds this many
    # seconds' worth of the per-minute rate.
    burst_seconds: float = 60.0


@dataclass
class Degrade:
    """Make the oracle miss needles, so reports have something to show."""

    miss_beyond_depth: float | None = None  # percent: needles deeper than this are missed
    miss_beyond_tokens: int | None = None  # contexts longer than this (o200k tokens) miss every needle
    miss_rate: float = 0.0  # share of requests that miss, drawn with the seed per request


@dataclass
class JudgeFaults:
    """Judges that give no verdict, so a run can rehearse a panel that errs (the oracle responder only)."""

    refusing_models: list[str] = field(default_factory=list)  # these models refuse to grade
    unreadable_models: list[str] = field(default_factory=list)  # these models' replies never hold a verdict
    unreadable_first: int = 0  # the first N times a model is given a judge prompt, its reply holds no verdict


@dataclass
class Responder:
    kind: str = "oracle"  # oracle | echo | cells | local
    model: str = "gemma-3-270m"  # the local engine's model, for `local`
    run: str = ""  # the compiled run directory whose cells `cells` answers from
    not_found: str = "UNANSWERABLE: the context does not contain the answer."
    degrade: Degrade = field(default_factory=Degrade)
    judge: JudgeFaults = field(default_factory=JudgeFaults)
    # A model that reasons (an OpenAI reasoning family at its effort, Claude thinking, a Gemini thinking model) first
    # spends this share of the tokens nspec allows its reasoning (`nspec.compiler.providers.contract.REASONING_TOKENS`,
    # or the budget its request sets), out of its max_tokens, as a real one does; 0 (the default): it answers at once.
    reasoning_share: float = 0.0


@dataclass
class Faults:
    """Rates (0..1) of things going wrong, drawn with the seed."""

    server_error_rate: float = 0.0  # live calls answered 500
    overloaded_rate: float = 0.0  # live calls answered 529 (Anthropic) / 503 (OpenAI)
    flex_unavailable_rate: float = 0.0  # OpenAI flex calls answered 429 "Resource Unavailable"
    drop_rate: float = 0.0  # live responses cut off mid-body (the connection drops)
    truncate_rate: float = 0.0  # file and results downloads cut off mid-body
    batch_validation_failure_rate: float = 0.0  # OpenAI batches that fail validation
    batch_expire_rate: float = 0.0  # batches that expire part-way
    expire_fraction: float = 0.5  # how much of an expiring batch is done when it expires
    request_error_rate: float = 0.0  # requests inside batches that come back as errors
    slow_batch_rate: float = 0.0  # batches that take `slow_factor` times longer
    slow_factor: float = 20.0


@dataclass
class EmulatorConfig:
    seed: int = 0
    api_key: str | None = None  # if set, only this key is accepted; otherwise any non-empty key
    # Model names served besides the providers' own (an OpenAI-compatible server's, say); any other is refused.
    models: list[str] = field(default_factory=list)
    # Azure deployments: name → the OpenAI model it runs (a deployment named as an OpenAI model runs that model).
    deployments: dict[str, str] = field(default_factory=dict)
    timing: Timing = field(default_factory=Timing)
    limits: Limits = field(default_factory=Limits)
    rate_limits: RateLimits = field(default_factory=RateLimits)
    responder: Responder = field(default_factory=Responder)
    faults: Faults = field(default_factory=Faults)


def _build(cls: Any, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise UserError(f"emulator config: `{where}` must be a mapping")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UserError(f"emulator config: unknown key `{where}.{unknown[0]}`; known: {', '.join(fields)}")
    values = {}
    for name, value in data.items():
        default = getattr(cls(), name)
        values[name] = _build(type(default), value, f"{where}.{name}") if dataclasses.is_dataclass(default) else value
        if isinstance(default, list) and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise UserError(f"emulator config: `{where}.{name}` must be a list of names")
        if isinstance(default, dict) and not (
            isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        ):
            raise UserError(f"emulator config: `{where}.{name}` must map names to names")
    return cls(**values)


def load_config(path: str | None, realistic: bool = False) -> EmulatorConfig:
    """Read a config file (YAML or JSON); None gives the defaults."""
    data: Any = {}
    if path is not None:
        try:
            text = Path(path).read_text("utf-8")
        except OSError as exc:
            raise UserError(f"emulator config {path}: {exc.strerror or exc}") from None
        data = json.loads(text) if path.endswith(".json") else YAML(typ="safe", pure=True).load(text) or {}
    config: EmulatorConfig = _build(EmulatorConfig, data, "config")
    if realistic:
        config.timing = Timing.realistic()
    return config


def draw_batch_faults(faults: Faults, rng: Any, count: int) -> dict[str, Any]:
    """The faults one batch of ``count`` requests gets, drawn at creation: its speed, whether it expires part-way,
    and which requests (by index) fail with a server error."""
    return {
        "slow": faults.slow_factor if rng.random() < faults.slow_batch_rate else 1.0,
        "expire_fraction": faults.expire_fraction if rng.random() < faults.batch_expire_rate else None,
        "failing": [i for i in range(count) if rng.random() < faults.request_error_rate],
    }


@dataclass(frozen=True)
class Schedule:
    """When one batch's work happens, on the emulator's clock: its requests start at `start` and take `per` seconds
    each, all are processed at `processed` and the batch ends at `finalized`; it expires at `expire` (the end of its
    window, `window_end`, or sooner with the expiry fault)."""

    start: float
    per: float
    processed: float
    finalized: float
    expire: float
    window_end: float

    def done_by(self, total: int, at: float) -> int:
        """How many of the batch's ``total`` requests are processed at ``at``."""
        if at <= self.start:
            return 0
        if self.per <= 0 or at >= self.processed:  # (not left to rounding: a batch whose time is up has done all)
            return total
        return min(total, math.floor((at - self.start) / self.per))


def schedule(batch: dict[str, Any], timing: Timing, validates: bool = True) -> Schedule:
    """A batch's schedule from its creation time, size and drawn faults; ``validates`` when the API first validates
    the input (Anthropic's does not)."""
    slow, total = batch["slow"], int(batch["total"])
    start = batch["created"] + (timing.validate_seconds * slow if validates else 0.0)
    per = timing.seconds_per_request * slow
    processed = start + total * per
    window_end = batch["created"] + timing.completion_window_seconds
    expire = window_end
    if batch["expire_fraction"] is not None:
        expire = min(window_end, start + math.floor(total * batch["expire_fraction"]) * per + per / 2)
    return Schedule(start, per, processed, processed + timing.finalize_seconds * slow, expire, window_end)
