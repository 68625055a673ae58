"""Compiling a spec into its run directory (DESIGN §3), and the plan that summarises it without writing.

The run id is the first 12 hex digits of the compile hash: the resolved spec, every haystack byte and the format
version. Files are written into a temporary folder beside the run directory and renamed into place at the end, so
a run directory either is complete or does not exist; compiling into an existing one is a no-op.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from ruamel.yaml import YAML

from nspec import jsonl
from nspec.errors import CompileError, UserError, writing
from nspec.inputs import Confinement
from nspec.run_layout import file_in_the_way
from nspec.version import __version__

from .compilation import Compilation, Mode
from .counts_file import CountsFile, Fetch
from .fit.fill import FAR_FROM_DEPTH
from .haystack import HaystackSource, load_haystack
from .judge_prompts import judge_prompt, judge_rubric
from .models import Model, models_of
from .prices import LANES, Lane, Usage, price_for, price_table
from .record import Cell
from .stats import CompileStats
from .tasks import registry
from .tokenizers import encoding

FORMAT_VERSION = 1
# The most cells a compile makes unless told otherwise: beyond any grid run so far, and still a bounded compile
# (about a minute per 100,000 cells at 128K tokens on two cores, see bench/compile.py).
DEFAULT_MAX_CELLS = 2_000_000


def compile_hash(spec: dict[str, Any], source: HaystackSource, tokenizers: list[str], task: str | None = None) -> str:
    """The run's identity: the spec, the haystack, how tokens were counted (a local model counts with its own
    tokenizer only when the local engine is installed), and the version of the task family a spec names."""
    digest = hashlib.sha256()
    digest.update(f"nspec-format-{FORMAT_VERSION}\0".encode())
    digest.update(json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
    digest.update(f"\0haystack\0{source.digest}".encode())
    digest.update(f"\0tokenizers\0{' '.join(tokenizers)}".encode())
    if task is not None:
        digest.update(f"\0task\0{task}".encode())
    return digest.hexdigest()


def effective_mode(model: Model) -> str:
    """batch, live, or local (on this machine, from the batch files), as the model's provider decides."""
    return model.api.mode(model.entry)


# The lanes a plan prices: each provider lane, with and without the compiled cache shape where caching applies.
PLAN_LANES = ("live", "live_cache", "batch", "batch_cache", "flex")


@dataclass
class ModelTotals:
    """What one model's cells add up to, and what they would cost on each lane."""

    model: Model
    cells: int = 0
    negative_controls: int = 0
    input_tokens: int = 0
    output_tokens_max: int = 0
    shards: list[dict[str, Any]] = field(default_factory=list)
    inexact_cells: int = 0
    # The cache reads and writes the compiled shape is expected to make.
    cached: Usage = field(default_factory=lambda: Usage(0, 0))
    control_cells: int = 0
    costs: dict[str, float] = field(default_factory=dict)  # per priced lane, summed request by request

    def __post_init__(self) -> None:
        model = self.model
        self.price = price_for(model.model_id, model.entry.get("price"))
        self.mode = effective_mode(model)
        has_batch = model.api.has_batch(model.entry)
        flex = model.api.takes_flex(model.entry)
        cache = model.cache is not None
        wanted = {
            "live": True,
            "live_cache": cache and self.mode != "batch",
            "batch": has_batch,
            "batch_cache": cache and has_batch and self.mode == "batch",
            "flex": flex,
        }
        price = self.price
        lanes = [lane for lane in PLAN_LANES if wanted[lane] and price is not None]
        self.lanes = [lane for lane in lanes if price is not None and price.has(_lane(lane))]
        self.costs = dict.fromkeys(self.lanes, 0.0)

    def add(self, cell: Cell) -> None:
        record = cell.record
        self.cells += 1
        self.inexact_cells += not record["tokens_exact"]
        self.negative_controls += record["negative"]
        prompt, answer = record["context_length"]["prompt"], record["max_tokens"]
        self.input_tokens += prompt
        self.output_tokens_max += answer
        plain = Usage(prompt, answer)
        cached = plain
        shape = record.get("cache")
        if shape is not None:
            self.control_cells += shape["arm"] == "control"
            write = shape.get("write_tokens", 0)
            hour = shape.get("ttl") == "1h"
            cached = Usage(prompt, answer, shape.get("read_tokens", 0), 0 if hour else write, write if hour else 0)
            self.cached += replace(cached, input_tokens=0, output_tokens=0)
        if self.price is not None:
            for lane in self.lanes:
                usage = cached if lane.endswith("_cache") or lane == "flex" else plain
                self.costs[lane] += self.price.cost(usage, _lane(lane)) or 0.0

    def as_dict(self, dropped: int) -> dict[str, Any]:
        model = self.model
        costs = {lane: round(usd, 4) for lane, usd in self.costs.items()}
        expected = {"batch": "batch", "flex": "flex"}.get(self.mode, "live")
        if model.cache is not None and expected != "flex":
            expected += "_cache"
        cost_usd: dict[str, Any] = {lane: costs.get(lane) for lane in PLAN_LANES}
        cost_usd.update(
            run=costs.get(expected),
            run_lane=expected,
            cheapest=min(costs, key=lambda lane: costs[lane]) if costs else None,
            known=self.price is not None,
            output="at most: every answer at its max_tokens",
        )
        if self.price is not None:
            cost_usd["price"] = {"source": self.price.source, "as_of": self.price.as_of}
        return {
            "label": model.label,
            "id": model.model_id,
            "mode": self.mode,
            "format": model.api.request_format,
            "tokenizer": (
                {"name": model.counter.known.counted_by, "exact": self.inexact_cells == 0, "margin": 0.0}
                if model.counter is not None
                else {"name": model.tokenizer.name, "exact": model.tokenizer.exact, "margin": model.tokenizer.margin}
            ),
            "cells": self.cells,
            "negative_controls": self.negative_controls,
            "dropped_cells": dropped,
            "requests": self.cells,
            "input_tokens": self.input_tokens,
            "output_tokens_max": self.output_tokens_max,
            "cache": (
                None
                if model.cache is None
                else {
                    "style": model.cache.style.kind,
                    "ttl": model.cache.ttl if model.cache.style.kind == "breakpoints" else None,
                    "control_cells": self.control_cells,
                    "read_tokens": self.cached.cache_read_tokens,
                    "write_tokens": self.cached.cache_write_tokens + self.cached.cache_write_1h_tokens,
                }
            ),
            "cost_usd": cost_usd,
            "shards": self.shards,
        }


def judge_budget(model: Model, answer_tokens: int) -> tuple[dict[str, Any], int]:
    """The params and answer budget of a judge's requests: the prompt's ``answer_tokens``, and, for a model that
    reasons, room for its reasoning at the least its API takes (its params' own settings win: an effort it sets,
    its max_tokens)."""
    params = dict(model.params)
    thinking = model.api.reasoning(model.entry)
    if thinking is not None:
        params = {**thinking.least, **params}
        thinking = model.api.reasoning({**model.entry, "params": params})
    budget = answer_tokens + (thinking.tokens if thinking is not None else 0)
    return params, params.get("max_tokens") or params.get("max_completion_tokens") or budget


def _lane(plan_lane: str) -> Lane:
    """The provider lane a plan lane is billed at."""
    return next(lane for lane in LANES if lane == plan_lane.removesuffix("_cache"))


LeftToJudges = Callable[[Mapping[str, Any]], float]  # a cell's record -> the share of such answers judges grade


class JudgeTotals:
    """What grading every answer would ask of each judge of the panel: an upper bound, since the judges grade only
    what the scorers leave undecided unless `when: always`; and, where the scorers are the default cascade alone
    and ``left`` says what share of a cell's kind of answers it leaves undecided (its calibration), the expected
    requests and cost."""

    def __init__(self, spec: dict[str, Any], left: LeftToJudges | None = None) -> None:
        scoring = spec.get("scoring") or []
        settings = next((s["judge"] for s in scoring if "judge" in s), None)
        self.models = [] if settings is None else models_of({"models": settings["models"]})
        self.always = settings is not None and settings.get("when", "undecided") == "always"
        self.prompt = judge_prompt(None if settings is None else settings.get("prompt"))
        self.words = 0 if settings is None else self.prompt.words_tokens(judge_rubric(settings))
        scorers = [kind for entry in scoring for kind in entry if kind != "judge"]
        self.left = left if scorers == ["auto"] and not self.always else None
        self.requests = 0
        self.input_tokens = 0
        self.expected_requests = 0.0
        self.expected_input_tokens = 0.0

    def add(self, cell: Cell) -> None:
        if not self.models:
            return
        record = cell.record
        texts = [
            record["question"],
            *record["expected"],
            *(n["text"] for n in record["needles"] if n["role"] == "target"),
        ]
        counted = self.words + record["max_tokens"] + sum(map(encoding("o200k_base").count, texts))
        self.requests += 1
        self.input_tokens += counted
        if self.left is not None:
            share = self.left(record)
            self.expected_requests += share
            self.expected_input_tokens += share * counted

    def as_list(self) -> list[dict[str, Any]]:
        out = []
        for model in self.models:
            price = price_for(model.model_id, model.entry.get("price"))
            mode = effective_mode(model)
            budget = judge_budget(model, self.prompt.answer_tokens)[1]
            usage = Usage(self.input_tokens, self.requests * budget)
            lane: Lane = "batch" if mode == "batch" else "flex" if mode == "flex" else "live"
            row: dict[str, Any] = {
                "label": model.label,
                "id": model.model_id,
                "mode": mode,
                "requests": self.requests,
                "input_tokens": self.input_tokens,
                "output_tokens_max": usage.output_tokens,
                "bound": "exact" if self.always else "at most",
                "cost_usd": None if price is None else _round(price.cost(usage, lane)),
            }
            if self.left is not None:
                expected = Usage(round(self.expected_input_tokens), round(self.expected_requests * budget))
                row["expected"] = {
                    "requests": round(self.expected_requests),
                    "share": round(self.expected_requests / self.requests, 4) if self.requests else 0.0,
                    "cost_usd": None if price is None else _round(price.cost(expected, lane)),
                }
            out.append(row)
        return out


def _round(usd: float | None) -> float | None:
    return None if usd is None else round(usd, 4)


@dataclass
class Plan:
    name: str
    run_id: str
    compile_hash: str
    haystack: dict[str, Any]
    models: list[dict[str, Any]]
    fallbacks: list[dict[str, Any]]
    judges: list[dict[str, Any]] = field(default_factory=list)
    task: dict[str, Any] | None = None  # the task family the spec runs (`task_info`)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "run_id": self.run_id,
            "compile_hash": self.compile_hash,
            **({"task": self.task} if self.task is not None else {}),
            "haystack": self.haystack,
            "models": self.models,
            "judges": self.judges,
            "fallbacks": self.fallbacks,
            "prices": {"as_of": price_table()["as_of"], "currency": price_table()["currency"]},
        }


def prepare(
    spec: dict[str, Any],
    base_dir: str,
    confinement: Confinement | None,
    max_cells: int,
    mode: Mode = Mode.COMPILE,
    counts: CountsFile | None = None,
    fetch: dict[str, Fetch] | None = None,
    check_longest: bool = False,
) -> tuple[Compilation, str]:
    """The compilation (with ``counts``, and ``fetch`` to ask for missing ones: calibrate) and the compile hash of a
    resolved spec, its grid checked against ``max_cells`` first — after, with ``check_longest``, its cells at the
    longest length (`Compilation.check_longest`), as validate checks them. The haystack is read only for a task
    family that places its content in one."""
    needs = registry.family(registry.named(spec)).needs_haystack
    source = load_haystack(spec["haystack"], base_dir, confinement) if needs and "haystack" in spec else None
    compilation = Compilation(spec, source, mode, counts, fetch, base_dir, confinement)
    if check_longest:
        compilation.check_longest()
    cells = compilation.count()
    if cells > max_cells:
        raise CompileError(
            f"the grid makes {cells:,} cells, more than the cap of {max_cells:,}: shrink the grid (lengths, depths, "
            "trials, models, prompts, repeats, questions), or raise the cap with --max-cells"
        )
    counted = [
        m.tokenizer.name if m.counter is None else f"{m.counter.known.counted_by}:{m.counter.known.digest()}"
        for m in compilation.models
    ]
    # What a family read from files its parameters name (`Setup.read`, `Task.inputs_digest`): a changed file is
    # another run. A spec of needles or a stack names no family: its hash is as it always was.
    digests = [f["sha256"] for f in compilation.task_files]
    digests += sorted({t.inputs_digest for _, t in compilation.tasks if t.inputs_digest is not None})
    family = compilation.family
    named = " ".join([family.name, family.version, *digests]) if "task" in spec else None
    return compilation, compile_hash(spec, compilation.source, counted, named)


def task_info(compilation: Compilation) -> dict[str, Any]:
    """The task family a spec runs, as the manifest records it: its name, version, parameters and axes, how the
    report shows its cells (`Family.view`), and the files it read."""
    spec, family = compilation.spec, compilation.family
    sweeps = list(registry.sweeps(spec))
    axes = list(dict.fromkeys([*(a.key for a in family.axes), *sweeps]))
    info = {
        "name": family.name,
        "version": family.version,
        "params": registry.params_of(spec),
        "axes": axes,
        "view": family.view(sweeps),
    }
    return {**info, "files": compilation.task_files} if compilation.task_files else info


def _haystack_info(compilation: Compilation) -> dict[str, Any]:
    """The haystack as compiled: its files (each with the most times one cell holds it), one pass of its sources in
    each encoding's tokens, and how many cells needed more than one pass."""
    if not compilation.fills:
        return {"kind": "none"}  # the family generates its contexts or brings them whole
    source, stats = compilation.source, compilation.stats
    use = stats.use
    info: dict[str, Any] = {
        "kind": source.kind,
        "sha256": source.digest,
        "documents": len(source.documents),
        "separator": source.separator,
        "vary": source.vary,
        "repeat": compilation.spec["haystack"].get("repeat", "allow"),
        "pass_tokens": stats.pass_tokens,
        "cells_repeating": use.cells_repeating,
        "max_uses_per_cell": max(use.max_uses, default=0),
    }
    if source.kind == "stack":
        info["files"] = source.files  # the items and questions files; the filler items are the documents
    else:
        info["files"] = [{**f, "max_uses_per_cell": n} for f, n in zip(source.files, use.max_uses, strict=True)]
    return info


def fallbacks(compilation: Compilation, models: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Everything the compile did in place of what the spec asked for, said once, per model where it applies: a
    haystack repeated within a cell, token counts estimated by a proxy (and cells fitted inside its margin), needles
    far from their depth, a model with no known price."""
    out: list[dict[str, Any]] = []
    stats = compilation.stats
    by_label = {m.label: m for m in compilation.models}
    for entry in models:
        label, model = entry["label"], by_label[entry["label"]]
        repeating = stats.repeating[label]
        if repeating and compilation.source.kind != "noise":
            tokens = stats.pass_tokens.get(model.tokenizer.encoding_name, 0)
            out.append(
                {
                    "kind": "repeated_haystack",
                    "model": label,
                    "cells": repeating,
                    "message": f"{label}: {repeating} of {entry['cells']} cells hold a haystack source more than once "
                    f"(up to {max(stats.use.max_uses)} times): the sources hold {tokens:,} "
                    f"{model.tokenizer.name} tokens. Set haystack.repeat: error to refuse, or use a larger haystack "
                    "(corpus: [austen, kjv] holds 1.95M tokens)",
                }
            )
        tokenizer = model.tokenizer
        if model.counter is not None:
            out.extend(_count_notes(stats, model, entry["cells"]))
        elif not tokenizer.exact:
            capped = stats.capped[label]
            message = (
                f"{label}: token counts are estimated ({tokenizer.name}); the real count may be up to "
                f"{tokenizer.margin:.0%} higher"
            )
            if model.max_context is None:
                message += "; max_context is not set, so nothing keeps a cell near the model's window inside it"
            elif capped:
                message += (
                    f"; {capped} cells were fitted {tokenizer.margin:.0%} inside max_context ({model.max_context:,}) "
                    "so the real prompt still fits"
                )
            if model.api.counts_tokens:
                message += "; `nspec calibrate SPEC` counts them exactly (the provider's count-tokens endpoint is free)"
            out.append({"kind": "estimated_tokens", "model": label, "cells": capped, "message": message})
        unplaced = stats.unplaced[label]
        if unplaced:
            out.append(
                {
                    "kind": "unplaced",
                    "model": label,
                    "cells": unplaced,
                    "message": f"{label}: {unplaced} of the task's prompts fit no grid length (with reserve_tokens); "
                    "they have no cell: add a longer context length to run them",
                }
            )
        out.extend(_family_notes(stats, label))
        far = stats.far[label]
        if far:
            out.append(
                {
                    "kind": "placement",
                    "model": label,
                    "needles": far,
                    "message": f"{label}: {far} needles sit more than {FAR_FROM_DEPTH:g} points from their requested "
                    "depth (the nearest sentence boundary is that far in a short context of long sentences); each "
                    "cell's depth.actual says where",
                }
            )
        if not entry["cost_usd"]["known"]:
            out.append(
                {
                    "kind": "unknown_price",
                    "model": label,
                    "message": f"{label}: no known price for {entry['id']}; its cost is unknown (set `price:` to "
                    "estimate it)",
                }
            )
    return out


def _family_notes(stats: CompileStats, label: str) -> list[dict[str, Any]]:
    """What a family did in place of the cells asked for: cells it drew again because a first draw could not be
    scored, cells it could make no longer than its largest size (cwe's vocabulary)."""
    out = []
    redrawn, short = stats.redrawn[label], stats.short[label]
    if redrawn:
        message = (
            f"{label}: {redrawn} cells were drawn again (seeded) because their first draw could not be scored (an "
            "expected answer empty, or absent from the context); each cell's data says what it asks"
        )
        out.append({"kind": "redrawn", "model": label, "cells": redrawn, "message": message})
    if short:
        message = (
            f"{label}: {short} cells reach the task's largest size before their length: their prompts hold as few as "
            f"{stats.shortest[label]:,} tokens (the task makes nothing larger); each cell's context_length says "
            "how long it is"
        )
        out.append({"kind": "short", "model": label, "cells": short, "message": message})
    return out


def left_out_notes(spec: dict[str, Any], models: list[Model]) -> list[dict[str, Any]]:
    """The params left out of a model's (or judge's) requests because its API refuses them: `defaults:` gave them to
    every model, and the loader set them to null where they cannot go (`nspec.spec.loader`)."""
    judging = next((s["judge"] for s in spec.get("scoring") or [] if "judge" in s), None)
    judges = [] if judging is None else models_of({"models": judging["models"]})
    out = []
    for model, role in [*((m, "") for m in models), *((j, " (judge)") for j in judges)]:
        why = model.api.refused_params(model.entry)
        left = {key: why[key] for key, value in model.params.items() if value is None and key in why}
        if left:
            names = ", ".join(left)
            reasons = "; ".join(dict.fromkeys(left.values()))
            out.append(
                {
                    "kind": "left_out_params",
                    "model": model.label + role,
                    "params": list(left),
                    "message": f"{model.label}{role}: {names} left out of its requests (null in its params): {reasons}",
                }
            )
    return out


def _count_notes(stats: CompileStats, model: Model, cells: int) -> list[dict[str, Any]]:
    """What a calibrated model's counts fell back to: cells the counts file has no counts for, and cells counted
    only by a composition that calibrate found wrong for this model."""
    notes = []
    uncounted, inexact = stats.uncounted[model.label], stats.inexact[model.label]
    if uncounted:
        message = (
            f"{model.label}: {uncounted} of {cells} cells are estimated ({model.tokenizer.name}, margin "
            f"{model.tokenizer.margin:.0%}): the counts file has no counts for them (the spec changed since it was "
            "calibrated); run `nspec calibrate SPEC` again"
        )
        notes.append({"kind": "estimated_tokens", "model": model.label, "cells": uncounted, "message": message})
    if inexact:
        message = (
            f"{model.label}: {inexact} of {cells} cells' counts are composed, and calibrate found composed counts "
            "wrong for this model; run `nspec calibrate SPEC` again to count them whole"
        )
        notes.append({"kind": "estimated_tokens", "model": model.label, "cells": inexact, "message": message})
    return notes


def plan(
    spec: dict[str, Any],
    base_dir: str,
    confinement: Confinement | None = None,
    max_cells: int = DEFAULT_MAX_CELLS,
    counts: CountsFile | None = None,
    left_to_judges: LeftToJudges | None = None,
) -> Plan:
    """Every cell made and counted, nothing written. Haystack files outside ``confinement`` are refused; a grid of
    more than ``max_cells`` cells is refused before any work; models with ``counts`` are fitted and counted in
    them; ``left_to_judges`` estimates the judges' share of the answers (`JudgeTotals`)."""
    compilation, digest = prepare(spec, base_dir, confinement, max_cells, Mode.PLAN, counts, check_longest=True)
    totals = {m.label: ModelTotals(m) for m in compilation.models}
    judges = JudgeTotals(spec, left_to_judges)
    for cell in compilation.cells():
        totals[cell.model.label].add(cell)
        judges.add(cell)
    models = [t.as_dict(compilation.stats.dropped[label]) for label, t in totals.items()]
    notes = fallbacks(compilation, models) + left_out_notes(spec, compilation.models)
    info = _haystack_info(compilation)
    return Plan(spec["name"], digest[:12], digest, info, models, notes, judges.as_list(), task_info(compilation))


class ShardWriter:
    """Writes one model's request lines into shards no larger than the provider (or the spec) allows."""

    def __init__(
        self, folder: Path, model: Model, caps: dict[str, Any], stage: str = "answers", round_name: str = ""
    ) -> None:
        max_lines, max_bytes = model.api.shard_limits(model.entry)
        self.max_lines = min(max_lines, caps.get("max_requests", max_lines))
        self.max_bytes = min(max_bytes, caps.get("max_bytes", max_bytes))
        self.folder, self.model, self.stage = folder, model, stage
        self.prefix = f"{model.slug}-{round_name}" if round_name else model.slug  # later rounds: new file names
        self.shards: list[dict[str, Any]] = []
        self._fh: IO[bytes] | None = None
        self._hash: Any = None

    def write(self, line: bytes, opens_group: tuple[int, int] | None = None) -> str:
        """Appends a request line; returns its shard's file. ``opens_group`` (forecast requests and bytes of a cache
        group the line starts) starts a new shard when the group would not fit in the rest of the current one but
        fits in a fresh one: requests that share a prefix are kept together."""
        if len(line) > self.max_bytes:
            raise CompileError(
                f"one request of {self.model.label} is {len(line):,} bytes, over the shard limit of "
                f"{self.max_bytes:,} bytes"
            )
        current = self.shards[-1] if self.shards else None
        full = current is None or current["requests"] >= self.max_lines or current["bytes"] + len(line) > self.max_bytes
        if not full and current is not None and current["requests"] and opens_group is not None:
            lines, size = opens_group
            fits_fresh = lines <= self.max_lines and size <= self.max_bytes
            full = fits_fresh and (
                current["requests"] + lines > self.max_lines or current["bytes"] + size > self.max_bytes
            )
        if full:
            self._open()
        current = self.shards[-1]
        assert self._fh is not None
        self._fh.write(line)
        self._hash.update(line)
        current["requests"] += 1
        current["bytes"] += len(line)
        return str(current["file"])

    def _open(self) -> None:
        self.close()
        name = f"{self.stage}/requests/{self.prefix}-{len(self.shards) + 1:04d}.jsonl"
        self._fh = open(self.folder / name, "wb")  # noqa: SIM115 - closed in close()
        self._hash = hashlib.sha256()
        self.shards.append({"file": name, "requests": 0, "bytes": 0, "sha256": ""})

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self.shards[-1]["sha256"] = self._hash.hexdigest()
            self._fh = None


@dataclass
class CompileResult:
    path: Path
    created: bool  # False when an identical run directory already existed


def compile_run(
    spec: dict[str, Any],
    base_dir: str,
    out_root: str | Path,
    provenance: dict[str, Any],
    confinement: Confinement | None = None,
    max_cells: int = DEFAULT_MAX_CELLS,
    counts: CountsFile | None = None,
) -> CompileResult:
    """Write the run directory of a resolved spec under ``out_root/<name>/<run id>``. Haystack files outside
    ``confinement`` (when given: `nspec.spec.load_spec` makes it) are refused unread; a grid of more than
    ``max_cells`` cells is refused before any work; models with ``counts`` (the provider's, from the spec's counts
    file) are fitted and counted in them."""
    blocked = file_in_the_way(Path(out_root) / spec["name"])
    if blocked is not None:  # said before the work, not after
        raise UserError(f"cannot write the run directory under {out_root}: {blocked} is not a folder")
    compilation, digest = prepare(spec, base_dir, confinement, max_cells, Mode.COMPILE, counts, check_longest=True)
    parent = Path(out_root) / spec["name"]
    final = parent / digest[:12]
    if (final / "manifest.json").is_file():
        return CompileResult(final, created=False)
    tmp = parent / f".{digest[:12]}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with writing(final):
            (tmp / "answers" / "requests").mkdir(parents=True)
            _write(tmp, spec, compilation, digest, provenance)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "manifest.json").is_file():
                raise
            shutil.rmtree(tmp)  # another compile of the same spec finished first
            return CompileResult(final, created=False)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return CompileResult(final, created=True)


def _write(
    folder: Path,
    spec: dict[str, Any],
    compilation: Compilation,
    digest: str,
    provenance: dict[str, Any],
) -> None:
    yaml_text = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096
    yaml.dump(spec, yaml_text)
    (folder / "spec.yaml").write_text(yaml_text.getvalue(), encoding="utf-8")
    caps = spec.get("run", {}).get("shard", {})
    writers = {m.label: ShardWriter(folder, m, caps) for m in compilation.models}
    totals = {m.label: ModelTotals(m) for m in compilation.models}
    seen: set[str] = set()
    with open(folder / "cells.jsonl", "wb") as cells_file, jsonl.writer(cells_file) as cell_lines:
        for cell in _unique(compilation.cells(), seen):
            assert cell.request is not None
            # A request line is encoded first: its shard depends on its size, and the shard's hash on its bytes.
            shard = writers[cell.model.label].write(jsonl.encode(cell.request), cell.opens_group)
            cell_lines.write({**cell.record, "shard": shard})
            totals[cell.model.label].add(cell)
    for label, writer in writers.items():
        writer.close()
        totals[label].shards = writer.shards
    models = [t.as_dict(compilation.stats.dropped[label]) for label, t in totals.items()]
    notes = fallbacks(compilation, models) + left_out_notes(spec, compilation.models)
    manifest = {
        "nspec_format": FORMAT_VERSION,
        "nspec_version": __version__,
        **Plan(
            spec["name"], digest[:12], digest, _haystack_info(compilation), models, notes, [], task_info(compilation)
        ).as_dict(),
        "provenance": provenance,
        "totals": {
            "cells": sum(m["cells"] for m in models),
            "requests": sum(m["requests"] for m in models),
            "input_tokens": sum(m["input_tokens"] for m in models),
            "dropped_cells": sum(m["dropped_cells"] for m in models),
        },
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", "utf-8")


def _unique(cells: Iterator[Cell], seen: set[str]) -> Iterator[Cell]:
    for cell in cells:
        cid = cell.record["cell_id"]
        if cid in seen:  # 64-bit ids: practically impossible, but never silently overwrite a result key
            raise CompileError(f"two cells share the id {cid}; change the seed")
        seen.add(cid)
        yield cell
