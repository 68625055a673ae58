"""Submit, collect and status for a run directory: batch models through `BatchRunner`, live models (and the small
remainder of failed batch requests) through the live runner, all recorded in one ledger and one results file."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from nspec.compiler.prices import price_for
from nspec.errors import BudgetSpent, UserError
from nspec.providers import Outcome, credentials
from nspec.runners.batch import BatchRunner
from nspec.runners.batch import Progress as RunProgress
from nspec.runners.events import Event, Listener, ignore
from nspec.runners.failpoints import failpoint
from nspec.runners.grading.judging import compile_judges
from nspec.runners.grading.scoring import score_run
from nspec.runners.ledger import Ledger
from nspec.runners.live import CallerSettings, LiveRequest, check_admissible, request_tokens, run_live
from nspec.runners.rundir import (
    ResultsFile,
    Run,
    RunModel,
    reconcile,
    record_outcome,
    register_shards,
    shard_lines,
)

# Modes whose requests go one by one from this process: live calls (flex ones too), and the local engine.
_DIRECT = ("live", "flex", "local")


@dataclass
class Session:
    run: Run
    ledger: Ledger
    batch: BatchRunner
    callers: dict[str, CallerSettings]
    stage: str
    events: Listener = field(default=ignore)
    max_usd: float | None = None  # the budget: live calls stop when the stage has cost this much

    @classmethod
    def open(
        cls,
        path: str,
        live_backoff: float = 0.5,
        stage: str = "answers",
        events: Listener = ignore,
        max_usd: float | None = None,
    ) -> Session:
        """Open a run; every key and package is checked here, before anything is sent."""
        run = Run(path)
        ledger = run.ledger()
        batch = BatchRunner(run, ledger, stage)
        attempts, _ = run.retry_policy()
        callers = {
            m.label: CallerSettings(
                m.provider, credentials(m.entry), m.entry.get("rate_limits", {}), attempts, live_backoff
            )
            for m in run.models(stage)
        }
        return cls(run, ledger, batch, callers, stage, events, max_usd)

    def close(self) -> None:
        self.ledger.close()

    def submit(self) -> RunProgress:
        progress = RunProgress()
        self.batch.submit(progress)
        results = ResultsFile(self.run.paths.results(self.stage))
        try:
            self._live([m for m in self.run.models(self.stage) if m.mode in _DIRECT], results, progress)
        finally:
            results.close()
        self._count(progress)
        return progress

    def collect(self, wait: bool = False) -> RunProgress:
        """Collect what is ready; with ``wait``, poll on the spec's backing-off schedule until nothing is pending
        (a `waiting` event before each sleep)."""
        progress = self._collect_once()
        low, high = self.poll_schedule()
        delay = low
        while wait and progress.pending:
            self.events(Event("waiting", self.stage, pending=progress.pending, delay=delay))
            time.sleep(delay)
            progress = self._collect_once()
            delay = min(high, delay * 1.5)
        return progress

    def _collect_once(self) -> RunProgress:
        progress = RunProgress()
        results = ResultsFile(self.run.paths.results(self.stage))
        try:
            self.batch.collect(results, progress)
            if progress.live:
                self._send_live(progress.live, results, progress)
            self._live([m for m in self.run.models(self.stage) if m.mode in _DIRECT], results, progress)
        finally:
            results.close()
        self._count(progress)
        return progress

    def _count(self, progress: RunProgress) -> None:
        counts = self.ledger.counts(self.stage)
        for entry in counts.values():
            states = entry["states"]
            progress.pending += sum(states.get(s, 0) for s in ("pending", "submitted", "retry"))
            progress.failed += states.get("failed", 0)
        for model in self.run.models(self.stage):  # not registered yet (collect before any submit): all pending
            if model.label not in counts:
                progress.pending += sum(s["requests"] for s in model.shards)

    def _live(self, models: list[RunModel], results: ResultsFile, progress: RunProgress) -> None:
        """Register live and local models' requests (once) and send every one without a final result."""
        register_shards(self.run, self.ledger, self.stage, models, state="live")
        wanted = (
            row["custom_id"]
            for model in models
            for state in ("pending", "submitted", "retry")
            for row in self.ledger.requests_in(self.stage, model.label, state)
        )
        self._send_live(wanted, results, progress)

    def _send_live(self, custom_ids: Iterable[str], results: ResultsFile, progress: RunProgress) -> None:
        # One entry per request, each id held once: a live stage of 100,000 requests holds no more than that.
        unsettled = self.ledger.open_requests(custom_ids)
        costing = self.run.costing(self.stage)
        reconcile(results, self.ledger, unsettled.keys(), costing)
        by_model: dict[str, dict[str, int]] = {}  # model → its requests to send → their sizes
        for cid, model in unsettled.items():
            if cid not in results.ids:
                by_model.setdefault(model, {})[cid] = 0
        del unsettled
        if not by_model:
            return
        models = {m.label: m for m in self.run.models(self.stage)}
        self._request_sizes(by_model)
        total = sum(len(ids) for ids in by_model.values())
        for label, ids in by_model.items():  # before anything is sent: a limit no request fits is the spec's to fix
            limit = self.callers[label].limits.get("tokens_per_minute")
            largest = max(ids, key=ids.__getitem__)
            check_admissible(
                LiveRequest(largest, label, models[label].provider, {}, ids[largest]),
                None if limit is None else (int(limit), "rate_limits.tokens_per_minute"),
            )

        def requests() -> Iterator[LiveRequest]:  # read from the shards as they are sent: never all at once
            for label, ids in by_model.items():
                model = models[label]
                for s in model.shards:
                    for cid, raw in shard_lines(self.run.path / s["file"]):
                        if cid in ids:
                            yield LiveRequest(cid, label, model.provider, json.loads(raw), ids[cid])

        kind = {label: "local" if models[label].mode == "local" else "live" for label in by_model}
        cost = [0.0]

        def record(request: LiveRequest, outcome: Outcome) -> None:
            source = {"kind": kind[request.model]}
            record_outcome(results, self.ledger, self.stage, request.model, outcome, source, costing)
            progress.collected += 1
            cost[0] += costing(request.model, source["kind"], outcome.usage) or 0.0
            failpoint("live-result")

        label = "/".join(sorted(set(kind.values())))
        self.events(Event("live-start", self.stage, label, total=total))

        def on_result(request: LiveRequest, outcome: Outcome) -> None:
            record(request, outcome)
            self.events(Event("live-result", self.stage, label, cost_usd=cost[0]))

        cap = self.max_usd
        spent = sum(entry["cost_usd"] for entry in self.ledger.counts(self.stage).values())

        def over_budget() -> bool:
            return cap is not None and spent + cost[0] >= cap

        try:
            progress.rate_limited += asyncio.run(run_live(self.callers, requests(), on_result, over_budget))
        finally:
            self.events(Event("live-end", self.stage, label))
        if over_budget():
            raise BudgetSpent(
                f"live calls stopped at the budget of ${cap:,.2f}: ${spent + cost[0]:,.4f} spent in this stage; "
                "what came back is recorded, the rest was not sent (raise budget.max_usd or --max-usd to continue)"
            )

    def _request_sizes(self, by_model: dict[str, dict[str, int]]) -> None:
        """Input plus answer budget of each request, for pacing, set in ``by_model``: the answers' from cells.jsonl,
        counted at compile (in the model's tokens); the judges' counted from their lines."""
        if self.stage == "answers":
            for cell in self.run.cells():
                for ids in by_model.values():
                    if cell["cell_id"] in ids:
                        ids[cell["cell_id"]] = cell["context_length"]["prompt"] + cell["max_tokens"]
            return
        for model in self.run.models(self.stage):
            judged = by_model.get(model.label)
            if judged is None:
                continue
            for s in model.shards:
                for cid, raw in shard_lines(self.run.path / s["file"]):
                    if cid in judged:
                        judged[cid] = request_tokens(model.provider, json.loads(raw))

    def poll_schedule(self) -> tuple[float, float]:
        poll = self.run.spec.get("run", {}).get("poll", {})
        return float(poll.get("min_seconds", 10)), float(poll.get("max_seconds", 300))


def stage_status(run: Run, ledger: Ledger, stage: str) -> dict[str, Any]:
    """What is pending, done and failed in a stage, per model, from the ledger alone: no key, no provider call."""
    now = time.time()
    counts = ledger.counts(stage)
    models = []
    for model in run.models(stage):
        entry = counts.get(model.label, {"states": {}, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0})
        known = price_for(model.entry["id"], model.entry.get("price")) is not None
        # Priced request by request as recorded; unknown when the price is, or when some results had none.
        cost = round(entry["cost_usd"], 4) if known and not entry.get("unpriced") else None
        total = sum(s["requests"] for s in model.shards)
        states = entry["states"]
        models.append(
            {
                "model": model.label,
                "mode": model.mode,
                "requests": total,
                "done": states.get("done", 0),
                "failed": states.get("failed", 0),
                "retrying": states.get("retry", 0),
                "pending": total - states.get("done", 0) - states.get("failed", 0),
                "input_tokens": entry["input_tokens"],
                "cache_read_tokens": entry.get("cache_read_tokens", 0),
                "cache_write_tokens": entry.get("cache_write_tokens", 0),
                "output_tokens": entry["output_tokens"],
                "cost_usd": cost,
                "batches": [
                    {
                        "batch_id": j.batch_id,
                        "state": j.state,
                        "provider_status": j.provider_status,
                        "requests": j.requests,
                        "attempt": j.attempt,
                        "age_seconds": None if j.created_at is None else round(now - j.created_at),
                    }
                    for j in ledger.jobs(stage)
                    if j.model == model.label and j.batch_id
                ],
            }
        )
    return {"run": str(run.path), "run_id": run.run_id, "stage": stage, "models": models}


def stages(run: Run) -> list[str]:
    """The stages a run has so far: answers, and judge once it is compiled."""
    return ["answers"] + (["judge"] if run.models("judge") else [])


def grade(
    path: str, wait: bool = False, events: Listener = ignore, live_backoff: float = 0.5
) -> tuple[dict[str, int], int]:
    """Score deterministically; send what the scorers leave to the judges through the judge stage, and ask again
    judges whose replies held no verdict (while the retry attempts last); fold the votes in. Returns the verdict
    counts and how many judge requests are still pending."""
    run = Run(path)
    counts = score_run(run)
    pending, rounds = 0, 0
    while True:
        written = compile_judges(run)
        if not run.models("judge") or (rounds and not written):
            break
        session = Session.open(path, live_backoff, stage="judge", events=events)
        try:
            session.submit()
            pending = session.collect(wait).pending
        finally:
            session.close()
        rounds += 1
        if pending:
            break
    if rounds:
        counts = score_run(run)
    return counts, pending


def set_scoring(run: Run, spec: dict[str, Any]) -> None:
    """Grade ``run`` from now on with ``spec``'s scoring section; the rest of the spec must be the run's, or the
    answers would not be answers to it."""
    import io

    from ruamel.yaml import YAML

    def rest(data: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in data.items() if k not in ("scoring", "report")}

    if rest(spec) != rest(run.spec):
        changed = sorted(
            k for k in set(spec) | set(run.spec) if k not in ("scoring", "report") and spec.get(k) != run.spec.get(k)
        )
        raise UserError(
            f"the spec differs from the run's in more than scoring ({', '.join(changed)}): compile "
            "and run it as a new run"
        )
    text = io.StringIO()
    YAML(typ="safe", pure=True).dump(spec["scoring"], text)
    run.paths.scoring_override.write_text(text.getvalue(), encoding="utf-8")
