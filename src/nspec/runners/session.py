"""Submit, collect and status for a run directory: batch models through `BatchRunner`, live models (and the small
remainder of failed batch requests) through the live runner, all recorded in one ledger and one results file."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from nspec import interrupt
from nspec.compiler.prices import price_for
from nspec.compiler.providers.io import Outcome
from nspec.compiler.providers.registry import provider
from nspec.errors import BudgetSpent, StillFailing, UserError
from nspec.events import Event, Listener, ignore
from nspec.records import ResultRecord
from nspec.runners.batch import BatchRunner
from nspec.runners.batch import Progress as RunProgress
from nspec.runners.failpoints import failpoint
from nspec.runners.grading.judging import compile_judges
from nspec.runners.grading.scoring import score_run
from nspec.runners.ledger import Ledger
from nspec.runners.live import CallerSettings, LiveRequest, check_admissible, request_tokens, run_live
from nspec.runners.run_store import (
    LineAt,
    ResultsFile,
    Run,
    RunModel,
    cell_ids,
    check_results,
    drop_results,
    located_shard_requests,
    lost_results,
    reconcile,
    record_outcome,
    register_shards,
    shard_lines,
    shard_request_at,
)

# Modes whose requests go one by one from this process: live calls (flex ones too), and the local engine.
_DIRECT = ("live", "flex", "local")
# Rounds of `--wait` that made no progress and failed exactly as the one before, before waiting gives up.
MAX_IDENTICAL_FAILURES = 8


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
            m.label: CallerSettings(m.provider, m.credentials(), m.entry.get("rate_limits", {}), attempts, live_backoff)
            for m in run.models(stage)
        }
        return cls(run, ledger, batch, callers, stage, events, max_usd)

    def close(self) -> None:
        self.ledger.close()

    def submit(self) -> RunProgress:
        progress = RunProgress()
        try:
            self.batch.submit(progress)
            results = ResultsFile(self.run.paths.results(self.stage))
            try:
                self._live([m for m in self.run.models(self.stage) if m.mode in _DIRECT], results, progress)
            finally:
                results.close()
        finally:
            self._say_errors(progress)
        self._count(progress)
        return progress

    def collect(self, wait: bool = False, max_wait: float | None = None) -> RunProgress:
        """Collect what is ready; with ``wait``, poll on the spec's backing-off schedule until nothing is pending
        (a `waiting` event before each sleep, a `failing` event for each failure of a round). Waiting gives up
        (`StillFailing`) when a round made no progress and failed exactly as the last one did,
        `MAX_IDENTICAL_FAILURES` rounds in a row, or when ``max_wait`` seconds would pass."""
        started = time.monotonic()
        progress = self._collect_once()
        low, high = self.poll_schedule()
        delay, streak, last = low, 0, None
        while wait and progress.pending:
            stuck = progress.failing and not (progress.collected or progress.created or progress.adopted)
            streak = streak + 1 if stuck and progress.failing == last else 1 if stuck else 0
            last = progress.failing
            if streak >= MAX_IDENTICAL_FAILURES:
                failures = "; ".join(f"{where}: {error}" for where, error in progress.errors.items())
                raise StillFailing(
                    "waiting",
                    f"gave up waiting: the same failure came back {streak} rounds in a row ({failures}); "
                    f"{progress.pending} requests pending; run the same command again to continue",
                )
            if max_wait is not None and time.monotonic() - started + delay > max_wait:
                raise StillFailing(
                    "waiting",
                    f"gave up waiting: --max-wait passed; {progress.pending} requests pending; run the same command "
                    "again to continue",
                )
            self.events(Event("waiting", self.stage, pending=progress.pending, delay=delay))
            _sleep(delay)
            progress = self._collect_once()
            delay = min(high, delay * 1.5)
        return progress

    def _collect_once(self) -> RunProgress:
        progress = RunProgress()
        results = ResultsFile(self.run.paths.results(self.stage))
        try:
            self._restore_lost(results)
            self.batch.collect(results, progress)
            if progress.live:
                self._send_live(progress.live, results, progress)
            self._live([m for m in self.run.models(self.stage) if m.mode in _DIRECT], results, progress)
        finally:
            results.close()
            self._say_errors(progress)
        self._count(progress)
        return progress

    def retry_errors(self) -> int:
        """Send again the requests whose final result is an error that trying again may fix (a 5xx, a batch that
        expired, a result missing from its batch): their lines leave the results file and each gets a new budget of
        attempts, sent by the next submit or collect. Returns how many."""
        path = self.run.paths.results(self.stage)
        wanted = {record["cell_id"] for record in self.run.results(self.stage) if retryable(record)}
        if wanted:
            drop_results(path, wanted, lambda: self.ledger.resend(sorted(wanted)))
        return len(wanted)

    def resend_lost(self) -> int:
        """Send again the requests whose final result the ledger records but the results file lacks and no provider
        keeps any more (what a provider still keeps is fetched again first, for free). Returns how many."""
        results = ResultsFile(self.run.paths.results(self.stage))
        try:
            lost = lost_results(self.ledger, self.stage, results.ids)
            self.batch.restore(results, lost)
            left = sorted(cid for cid in lost if cid not in results.ids)
        finally:
            results.close()
        self.ledger.resend(left)
        return len(left)

    def _say_errors(self, progress: RunProgress) -> None:
        for where, error in progress.errors.items():
            self.events(Event("failing", self.stage, where, detail=error))

    def _restore_lost(self, results: ResultsFile) -> None:
        """Results the ledger records as final that the results file lacks (lines lost to a bad sync, a partial
        restore, a deleted file): fetched again from their batches' output files, which the providers keep for
        weeks. What cannot be fetched again (a live answer, a batch the provider no longer has) is refused with the
        command that asks it again: scores never shrink silently."""
        lost = lost_results(self.ledger, self.stage, results.ids)
        if not lost:
            return
        restored = self.batch.restore(results, lost)
        if restored:
            self.events(Event("restored", self.stage, total=restored))
        left = [cid for cid in lost if cid not in results.ids]
        if left:
            raise UserError(
                f"{len(left)} results recorded in the ledger are missing from {results.path} and cannot be fetched "
                f"again (live answers, or batches the provider no longer keeps): `nspec collect {self.run.path} "
                "--resend-lost` asks them again (paid)"
            )

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

        def on_wait(model: str, seconds: float, why: str) -> None:
            self.events(Event("rate-wait", self.stage, model, delay=seconds, detail=why))

        try:
            requests = {label: self._live_requests(label, ids, models[label]) for label, ids in by_model.items()}
            report = asyncio.run(run_live(self.callers, requests, on_result, over_budget, on_wait))
        except interrupt.Interrupted:
            raise interrupt.Interrupted(
                f"{progress.collected} of the {total} {label} requests sent now came back and are saved in "
                f"{results.path}; those not back yet are asked again when the run goes on"
            ) from None
        finally:
            self.events(Event("live-end", self.stage, label))
        progress.rate_limited += report.rate_limited
        progress.errors.update(report.closed)
        progress.failing.update(f"{label}: closed" for label in report.closed)
        for job in self.ledger.jobs(self.stage, ("live",)):  # in sight in `status` until the model answers again
            if job.model in report.closed:
                self.ledger.job_failed(job.id, report.closed[job.model], "closed")
            elif job.error is not None and job.model in by_model:
                self.ledger.update_job(job.id, error=None, error_repeats=0, error_kind=None)
        if over_budget():
            raise BudgetSpent(
                f"live calls stopped at the budget of ${cap:,.2f}: ${spent + cost[0]:,.4f} spent in this stage; "
                "what came back is recorded, the rest was not sent (raise budget.max_usd or --max-usd to continue)"
            )

    def _live_requests(self, label: str, ids: dict[str, int], model: RunModel) -> Iterator[LiveRequest]:
        """The requests of model ``label`` to send (``ids``: their sizes), read from its shards as they are sent.
        Lines their provider gives a `send_key` (a local engine, which reads a prefix shared with the prompt before
        from its cache) go after the others, in the keys' order: only the keys and where their lines are, not the
        lines, are held until then (`run_live` reads requests off its event loop: this first pass over every line
        holds up no call)."""
        api = provider(model.provider)
        keyed: list[tuple[bytes, int, LineAt, str]] = []  # key, shard, line: ties keep the compiled order
        for shard, s in enumerate(model.shards):
            for at, cid, line in located_shard_requests(self.run.path / s["file"]):
                if cid not in ids:
                    continue
                key = api.send_key(line)
                if key is None:
                    yield LiveRequest(cid, label, model.provider, line, ids[cid])
                else:
                    keyed.append((key, shard, at, cid))
        keyed.sort()
        for _, shard, at, cid in keyed:
            line = shard_request_at(self.run.path / model.shards[shard]["file"], at, cid)
            yield LiveRequest(cid, label, model.provider, line, ids[cid])

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


def _sleep(seconds: float) -> None:
    """Wait between two polls, stopping at once when the user asks (`nspec.interrupt`): the batches go on at their
    providers, and the next run collects them."""
    until = time.monotonic() + seconds
    with interrupt.watching():
        while (left := until - time.monotonic()) > 0:
            if interrupt.requested():
                raise interrupt.Interrupted("stopped waiting; the batches go on at their providers")
            time.sleep(min(0.1, left))


# Error codes of results written before results said whether they may be retried, that trying again may fix.
_RETRYABLE_CODES = ("429", "connection", "missing", "bad_line", "not_text", "batch_expired")


def retryable(record: ResultRecord) -> bool:
    """Whether a final result is an error that sending the request again may fix."""
    if record["status"] == "ok":
        return False
    error = record["error"] or {}
    if "retryable" in error:
        return bool(error["retryable"])
    code = str(error.get("code"))
    return record["status"] == "expired" or code in _RETRYABLE_CODES or (code.isdigit() and int(code) >= 500)


def stage_status(run: Run, ledger: Ledger, stage: str) -> dict[str, Any]:
    """What is pending, done and failed in a stage, per model, from the ledger and the results file: no key, no
    provider call. Every batch on record is listed (released and surplus ones too, a surplus batch's cost counted),
    with the last error of its job; so is a job whose upload or create keeps failing. ``lost`` counts results the
    ledger records that the results file lacks (`nspec collect` fetches them again)."""
    now = time.time()
    counts = ledger.counts(stage)
    present = set(cell_ids(run.paths.results(stage)))
    lost: dict[str, int] = {}
    for missing in lost_results(ledger, stage, present).values():
        lost[missing.model] = lost.get(missing.model, 0) + 1
    jobs, on_record = ledger.jobs(stage), ledger.batches(stage)
    errors = {j.batch_id: (j.error, j.error_repeats) for j in jobs if j.error and j.batch_id}
    models = []
    for model in run.models(stage):
        entry = counts.get(model.label, {"states": {}, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0})
        known = price_for(model.entry["id"], model.entry.get("price")) is not None
        batches = [b for b in on_record if b.model == model.label]
        surplus = sum(b.cost_usd or 0.0 for b in batches if b.origin == "surplus")
        # Priced request by request as recorded; unknown when the price is, or when some results had none.
        cost = round(entry["cost_usd"] + surplus, 4) if known and not entry.get("unpriced") else None
        total = sum(s["requests"] for s in model.shards)
        states = entry["states"]
        listed = [
            {
                "batch_id": b.batch_id,
                "origin": b.origin,
                "state": b.state,
                "provider_status": b.provider_status,
                "requests": b.requests,
                "age_seconds": round(now - b.created_at),
                "note": b.note,
                "cost_usd": b.cost_usd,
                "error": errors.get(b.batch_id, (None, 0))[0],
                "error_repeats": errors.get(b.batch_id, (None, 0))[1],
            }
            for b in batches
        ]
        unsent = [  # jobs whose batch does not exist yet, with the error that holds them back
            {
                "shard": j.shard,
                "state": j.state,
                "requests": j.requests,
                "error": j.error,
                "error_repeats": j.error_repeats,
            }
            for j in jobs
            if j.model == model.label and j.batch_id is None and j.error
        ]
        models.append(
            {
                "model": model.label,
                "mode": model.mode,
                "requests": total,
                "done": states.get("done", 0),
                "failed": states.get("failed", 0),
                "retrying": states.get("retry", 0),
                "pending": total - states.get("done", 0) - states.get("failed", 0),
                "lost": lost.get(model.label, 0),
                "input_tokens": entry["input_tokens"],
                "cache_read_tokens": entry.get("cache_read_tokens", 0),
                "cache_write_tokens": entry.get("cache_write_tokens", 0),
                "output_tokens": entry["output_tokens"],
                "cost_usd": cost,
                "batches": listed,
                "unsent": unsent,
            }
        )
    return {"run": str(run.path), "run_id": run.run_id, "stage": stage, "models": models}


def failure_summary(run: Run) -> dict[str, tuple[int, str]]:
    """Why the answers that ended without one did: per error code, how many, and the first one's message."""
    found: dict[str, tuple[int, str]] = {}
    for record in run.results("answers"):
        if record["status"] != "ok":
            error = record["error"] or {}
            code = str(error.get("code") or record["status"])
            count, message = found.get(code, (0, str(error.get("message") or "")))
            found[code] = (count + 1, message)
    return found


def stages(run: Run) -> list[str]:
    """The stages a run has so far: answers, and judge once it is compiled."""
    return ["answers"] + (["judge"] if run.models("judge") else [])


def grade(
    path: str,
    wait: bool = False,
    events: Listener = ignore,
    live_backoff: float = 0.5,
    max_wait: float | None = None,
) -> tuple[dict[str, int], int]:
    """Score deterministically; send what the scorers leave to the judges through the judge stage, and ask again
    judges whose replies held no verdict (while the retry attempts last); fold the votes in. Returns the verdict
    counts and how many judge requests are still pending. Answers the ledger records that the results file lacks
    are refused first (`check_results`): scores never shrink silently."""
    run = Run(path)
    check_results(run, "answers")
    counts = score_run(run)
    pending, rounds = 0, 0
    while True:
        written = compile_judges(run)
        if not run.models("judge") or (rounds and not written):
            break
        session = Session.open(path, live_backoff, stage="judge", events=events)
        try:
            session.submit()
            pending = session.collect(wait, max_wait).pending
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
