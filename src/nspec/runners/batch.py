"""Batch runs: submit shards as provider batches, poll them, collect and normalise results, resubmit what is missing.

Crash safety. Every remote call is bracketed by ledger writes, so resuming after a kill at any point is safe:
- killed after an upload, before recording it: the file is uploaded again (files cost nothing; the orphan is inert);
- killed after a create call, before recording the batch (or a create whose answer was lost: creates are never
  retried by the SDKs): the job is in `creating`, and resuming asks the provider for the batch (`BatchClient.find`)
  before creating one. Batches carry this folder's token, the run id, shard hash and attempt where the provider
  takes metadata, and the match is exact: a second match is a surplus batch, cancelled, and its cost counted. Where
  batches carry none (Anthropic's), the candidates are batches of the shard's size created after the recorded intent
  that no run folder of this machine holds (`runners.claims`), the first created after the intent preferred; the
  others are noted and left alone (they may be someone else's). An adopted batch is confirmed by its custom ids when
  it is collected: one whose results are not the shard's is released, and the shard submitted again;
- a create that failed: the job stays unsent and is tried again each round, its requests in its shard; a retry shard
  is made only of requests in no unsent shard, so a failing create never multiplies jobs, and a job whose requests
  were all answered meanwhile is superseded, never sent;
- killed while downloading or parsing: the job is not yet `collected`, so it is downloaded again; results already
  written are kept and not written twice (`ResultsFile`).

Provider data is untrusted. A result line that is no result (`BadLine`) is counted, the file kept and named; its
request, like one the batch has no line for, is missing and is sent again while its attempts last, then ends as an
error naming the batch. A batch nspec created is never "not ours". A job's failure is recorded on it and the other
jobs go on; a refusal stops its model, and is raised once every other job had its turn.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nspec.compiler.providers.credentials import credentials
from nspec.compiler.providers.io import BadLine, BatchClient, BatchView, Outcome
from nspec.compiler.providers.registry import provider
from nspec.errors import Gone, MalformedResponse, ProviderError, Refused
from nspec.runners import claims
from nspec.runners.failpoints import failpoint
from nspec.runners.ledger import Job, Ledger
from nspec.runners.run_store import (
    Lost,
    ResultsFile,
    Run,
    reconcile,
    record_outcome,
    register_shards,
    result_record,
    shard_lines,
)

# Job states before the batch exists: a job in one of them is advanced (uploaded, created) at every submit and collect.
UNSENT = ("planned", "uploaded", "creating")


@dataclass
class Progress:
    """What a submit or collect call did and what is left."""

    created: list[str] = field(default_factory=list)  # batch ids created now
    adopted: list[str] = field(default_factory=list)  # batch ids found again after a crash
    collected: int = 0  # results written now
    pending: int = 0  # requests still waiting
    failed: int = 0  # requests that ended without an answer
    live: list[str] = field(default_factory=list)  # custom_ids to send live
    rate_limited: int = 0  # 429s received by live calls
    errors: dict[str, str] = field(default_factory=dict)  # what failed this round and why (job or model → error)
    # The kinds of failure of this round (model, error class and status; not the message, which often carries an id
    # of the provider's own): `--wait` gives up when they come back unchanged round after round.
    failing: set[str] = field(default_factory=set)


class BatchRunner:
    def __init__(self, run: Run, ledger: Ledger, stage: str = "answers") -> None:
        self.run = run
        self.costing = run.costing(stage)
        self.ledger = ledger
        self.stage = stage
        self.models = {m.label: m for m in run.models(stage)}
        self.batch_models = [m for m in self.models.values() if m.mode == "batch"]
        # Every key and package is checked before anything is uploaded.
        creds = {m.label: credentials(m.entry) for m in self.batch_models}
        self.clients: dict[str, BatchClient] = {
            m.label: provider(m.provider).batches(creds[m.label]) for m in self.batch_models
        }
        # Where each model's batches live (ids are unique at one service, not across services), for `claims`.
        self.services = {m.label: f"{m.provider} {creds[m.label].base_url or ''}" for m in self.batch_models}

    def plan(self) -> None:
        """Record the compiled shards as jobs (once)."""
        register_shards(self.run, self.ledger, self.stage, self.batch_models)

    def submit(self, progress: Progress) -> None:
        self.plan()
        self._each_job(UNSENT, self._advance, progress)

    def _each_job(self, states: tuple[str, ...], step: Callable[[Job, Progress], None], progress: Progress) -> None:
        """Run ``step`` on every job of the stage in ``states``, each on its own: a failure is recorded on its job
        (and said in ``progress.errors``) and the others go on; a refusal stops its model's jobs and is raised once
        the other models' had their turn."""
        refused: Refused | None = None
        stopped: set[str] = set()
        for job in self.ledger.jobs(self.stage, states):
            if job.model not in self.clients or job.model in stopped:
                continue
            try:
                step(job, progress)
            except (ProviderError, Refused) as exc:
                message, kind = f"{type(exc).__name__}: {exc}", f"{type(exc).__name__} {exc.status or ''}".strip()
                self.ledger.job_failed(job.id, message, kind)
                progress.errors[f"{job.model} ({job.batch_id or Path(job.shard).name})"] = message
                progress.failing.add(f"{job.model}: {kind}")
                if isinstance(exc, Refused):
                    stopped.add(job.model)
                    refused = refused or exc
            else:
                if job.error is not None:  # its calls go through again
                    self.ledger.update_job(job.id, error=None, error_repeats=0, error_kind=None)
        if refused is not None:
            raise refused

    def _metadata(self, job: Job, file_id: str | None) -> dict[str, str]:
        """What a batch carries to be found again: the folder, the run, the shard, the attempt, its requests and its
        file."""
        return {
            "nspec_folder": self.ledger.folder_token(),
            "nspec_run": self.run.run_id,
            "nspec_shard": job.shard_sha256[:40],
            "nspec_attempt": str(job.attempt),
            "requests": str(job.requests),
            **({"nspec_file": file_id} if file_id else {}),
        }

    def _advance(self, job: Job, progress: Progress) -> None:
        client = self.clients[job.model]
        if job.state == "creating" and self._adopt(job, client, progress):
            return
        if not self.ledger.awaiting(job.shard):  # its requests were answered elsewhere meanwhile: nothing to send
            self.ledger.update_job(job.id, state="superseded", error=None, error_repeats=0, error_kind=None)
            return
        file_id = job.file_id
        if job.state == "planned" or file_id is None:
            file_id = client.upload(self.run.path / job.shard)
            failpoint("after-upload")
            self.ledger.update_job(job.id, state="uploaded", file_id=file_id)
        tried_before = job.intent_at is not None
        self.ledger.update_job(job.id, state="creating", intent_at=time.time())
        batch_id = client.create(file_id, self.run.path / job.shard, self._metadata(job, file_id))
        failpoint("after-create")
        self._created(job, batch_id)
        progress.created.append(batch_id)
        if tried_before and client.finds_exactly:  # an earlier create of this job may have made a batch after all
            found = client.find(self._metadata(job, file_id), job.intent_at or 0.0)
            self._surplus(job, client, [(b, t) for b, t in found if b != batch_id])

    def _created(self, job: Job, batch_id: str, adopted: bool = False) -> None:
        self.ledger.job_created(job.id, batch_id, adopted)
        claims.claim(self.services[job.model], batch_id, self.run.path)

    def _adopt(self, job: Job, client: BatchClient, progress: Progress) -> bool:
        """Find the batch of a create that may have reached the provider; True if one was adopted."""
        assert job.intent_at is not None
        found = client.find(self._metadata(job, job.file_id), job.intent_at)
        known = self.ledger.known_batch_ids()
        elsewhere = claims.held_elsewhere(self.services[job.model], [b for b, _ in found], self.run.path)
        fresh = [(b, t) for b, t in found if b not in known and b not in elsewhere]
        if not fresh:
            return False
        # The earliest created after the intent first; then those within the clock skew before it, latest first.
        after = sorted((c for c in fresh if c[1] >= job.intent_at), key=lambda c: c[1])
        before = sorted((c for c in fresh if c[1] < job.intent_at), key=lambda c: -c[1])
        (chosen, _), *rest = after + before
        self._created(job, chosen, adopted=True)
        progress.adopted.append(chosen)
        self._surplus(job, client, rest)
        return True

    def _surplus(self, job: Job, client: BatchClient, found: list[tuple[str, float]]) -> None:
        """Other batches found for the job's shard: where the search is exact they are ours, paid for and of no use
        (cancelled, and recorded so their cost is counted); where it is not, they may be anyone's (noted, left)."""
        known = self.ledger.known_batch_ids()
        for batch_id, created in found:
            if batch_id in known:
                continue
            if client.finds_exactly:
                self.ledger.add_batch(job, batch_id, "surplus", "surplus", created, "a second batch of the shard")
                claims.claim(self.services[job.model], batch_id, self.run.path)
            else:
                note = "of the shard's size, created after the intent; not adopted, left alone"
                self.ledger.add_batch(job, batch_id, "seen", "seen", created, note)
        self._cancel_surplus()

    def _cancel_surplus(self) -> None:
        for batch in self.ledger.batches(self.stage, ("surplus",)):
            client = self.clients.get(batch.model)
            if client is None:
                continue
            try:
                client.cancel(batch.batch_id)
            except ProviderError as exc:  # cancelled at the next round
                self.ledger.update_batch(batch.batch_id, note=f"cancel failed: {exc}"[:500])
            else:
                self.ledger.update_batch(batch.batch_id, state="cancelling")

    def _account_surplus(self) -> None:
        """A cancelled surplus batch, once ended, is downloaded for what it cost (its answers are not used)."""
        for batch in self.ledger.batches(self.stage, ("cancelling",)):
            client = self.clients.get(batch.model)
            if client is None:
                continue
            try:
                view = self._poll(client, batch.batch_id)
                if not view.ended:
                    continue
                cost = 0.0
                for item in client.download(view, self.run.paths.downloads(self.stage)):
                    if isinstance(item, Outcome):
                        cost += self.costing(batch.model, "batch", item.usage) or 0.0
            except ProviderError as exc:
                self.ledger.update_batch(batch.batch_id, note=f"accounting failed: {exc}"[:500])
                continue
            self.ledger.update_batch(batch.batch_id, state="cancelled", provider_status=view.status, cost_usd=cost)

    def collect(self, results: ResultsFile, progress: Progress) -> None:
        max_attempts, live_below = self.run.retry_policy()
        self._reconcile(results)
        self._cancel_surplus()
        # Jobs whose upload or create failed before are tried again: a persistent failure stays in sight on the job.
        self._each_job(UNSENT, self._advance, progress)
        collect = lambda job, p: self._collect_job(job, results, max_attempts, p)  # noqa: E731
        self._each_job(("created",), collect, progress)
        self._account_surplus()
        self._resubmit(live_below, progress)

    def _collect_job(self, job: Job, results: ResultsFile, max_attempts: int, progress: Progress) -> None:
        client = self.clients[job.model]
        assert job.batch_id is not None
        gone: str | None = None
        try:
            view = self._poll(client, job.batch_id)
        except Gone as exc:  # the batch itself is gone: its results will never come
            self._missing(results, job, self.ledger.submitted_to(job.id), {}, max_attempts, progress, str(exc))
            return
        self.ledger.update_job(job.id, provider_status=view.status)
        self.ledger.update_batch(job.batch_id, provider_status=view.status)
        if not view.ended:
            return
        expected = self.ledger.submitted_to(job.id)
        if view.status == "failed":  # refused as a whole (validation): sending it again would fail again
            reason = client.failure(job.batch_id)
            for cid in sorted(expected):
                refused = Outcome(cid, "error", error={"code": "batch_failed", "message": reason}, retryable=False)
                self._final(results, job, refused, progress)
            self.ledger.update_job(job.id, state="failed")
            self.ledger.update_batch(job.batch_id, state="ended", note=reason)
            return
        handled = bad_count = 0
        bad: dict[str, BadLine] = {}  # the bad line of each request that has no good one
        first_bad: BadLine | None = None
        try:
            for item in client.download(view, self.run.paths.downloads(self.stage)):
                if isinstance(item, BadLine):
                    bad_count += 1
                    first_bad = first_bad or item
                    if item.custom_id in expected:
                        bad[item.custom_id] = item
                    continue
                if item.custom_id not in expected:
                    continue  # a line already handled before an interruption, or one that is not this batch's
                expected.discard(item.custom_id)  # a second line for one request is not read
                bad.pop(item.custom_id, None)
                self._handle(results, job, item, max_attempts, progress)
                if not handled:
                    failpoint("during-download")
                handled += 1
        except Gone as exc:  # its result file is gone (past its retention): what it held is missing
            gone = str(exc)
        if job.adopted and expected and not handled and view.done and gone is None:
            # Adopted after a crash, and its custom ids are not the shard's: someone else's batch.
            self.ledger.job_released(job, f"released batch {job.batch_id}: its results are not this shard's")
            return
        note = None if first_bad is None else f"{bad_count} lines of its results are no results, the first: {first_bad}"
        self._missing(results, job, expected, bad, max_attempts, progress, gone or note)

    def _missing(
        self,
        results: ResultsFile,
        job: Job,
        expected: set[str],
        bad: dict[str, BadLine],
        max_attempts: int,
        progress: Progress,
        note: str | None,
    ) -> None:
        """The job's requests that have no usable line (``bad``: those whose line is no result) count as missing,
        sent again while their attempts last; the job is collected and its batch ended, with ``note`` said."""
        for cid in sorted(expected):
            line = bad.get(cid)
            reason = line or note or "has no result for it"
            message = f"batch {job.batch_id}: {reason}"
            missing = Outcome(cid, "error", error={"code": "bad_line" if line else "missing", "message": message})
            self._handle(results, job, missing, max_attempts, progress)
        self.ledger.update_job(job.id, state="collected", collected_at=time.time())
        assert job.batch_id is not None
        self.ledger.update_batch(job.batch_id, state="ended", note=note)
        if note is not None:
            progress.errors[f"{job.model} ({job.batch_id})"] = note

    def _poll(self, client: BatchClient, batch_id: str) -> BatchView:
        """The batch as the provider sees it, checked to be the one asked for (a proxy's mix-up must not steer a
        download to another batch)."""
        view = client.poll(batch_id)
        if view.batch_id != batch_id:
            raise MalformedResponse("batch", f"asked for batch {batch_id}, the answer is batch {view.batch_id}")
        return view

    def restore(self, results: ResultsFile, lost: dict[str, Lost]) -> int:
        """Write again, from their batches' output files, the results of ``lost`` that came from a batch; the ledger
        already has them. Returns how many."""
        by_job: dict[int, set[str]] = {}
        for cid, missing in lost.items():
            if missing.source == "batch" and missing.job_id is not None:
                by_job.setdefault(missing.job_id, set()).add(cid)
        restored = 0
        for job in self.ledger.jobs(self.stage):
            wanted = by_job.get(job.id)
            if not wanted or job.batch_id is None or job.model not in self.clients:
                continue
            client = self.clients[job.model]
            came: dict[str, Any] = {"kind": "batch", "batch_id": job.batch_id, "attempt": job.attempt}
            try:
                view = self._poll(client, job.batch_id)
                if not view.ended:
                    continue
                for item in client.download(view, self.run.paths.downloads(self.stage)):
                    if isinstance(item, Outcome) and item.custom_id in wanted:
                        wanted.discard(item.custom_id)
                        restored += results.append(result_record(self.stage, job.model, item, came))
            except Gone:  # what it held cannot be fetched again: left lost, to be sent again on request
                continue
        return restored

    def _reconcile(self, results: ResultsFile) -> None:
        """Results written before a crash that the ledger does not know as final yet."""
        unsettled = (  # streamed from the ledger: the results file's ids are the set it is matched against
            row["custom_id"]
            for model in self.batch_models
            for state in ("submitted", "retry", "pending")
            for row in self.ledger.requests_in(self.stage, model.label, state)
        )
        reconcile(results, self.ledger, unsettled, self.costing)

    def _handle(self, results: ResultsFile, job: Job, outcome: Outcome, max_attempts: int, progress: Progress) -> None:
        row = self.ledger.request_states([outcome.custom_id])[outcome.custom_id]
        if row["state"] in ("done", "failed"):
            return
        attempts = row["attempts"] - row["budget_from"]
        if outcome.status == "ok" or not outcome.retryable or attempts >= max_attempts:
            self._final(results, job, outcome, progress)
        else:
            self.ledger.mark_retry([outcome.custom_id], row["shard"])

    def _final(self, results: ResultsFile, job: Job, outcome: Outcome, progress: Progress) -> None:
        source = {"kind": "batch", "batch_id": job.batch_id, "attempt": job.attempt}
        record_outcome(results, self.ledger, self.stage, job.model, outcome, source, self.costing)
        progress.collected += 1

    def _resubmit(self, live_below: int, progress: Progress) -> None:
        """Requests to retry: a small remainder goes live; the rest into new shards, submitted now."""
        unsent = {job.shard for job in self.ledger.jobs(self.stage, UNSENT)}
        for model in self.batch_models:
            # Requests already in a retry shard whose batch is not created yet wait for that one: never a second.
            rows = [r for r in self.ledger.requests_in(self.stage, model.label, "retry") if r["shard"] not in unsent]
            if not rows:
                continue
            if len(rows) < live_below:
                progress.live += [r["custom_id"] for r in rows]
                continue
            attempt = max(r["attempts"] for r in rows) + 1
            wanted = {r["custom_id"] for r in rows}
            first = Path(model.shards[0]["file"])
            slug = first.name.rsplit("-", 1)[0]
            number = len(self.ledger.jobs(self.stage)) + 1
            shard = str(first.parent / f"{slug}-retry{attempt}-{number:04d}.jsonl")
            target = self.run.path / shard
            tmp = target.with_suffix(".part")
            with open(tmp, "wb") as out:  # a line at a time: the retries may be most of a 200 MB shard
                for s in model.shards:
                    out.writelines(line for cid, line in shard_lines(self.run.path / s["file"]) if cid in wanted)
            tmp.replace(target)
            with open(target, "rb") as fh:
                sha = hashlib.file_digest(fh, "sha256").hexdigest()
            self.ledger.mark_retry(sorted(wanted), shard)
            self.ledger.add_job(self.stage, model.label, model.provider, shard, sha, sorted(wanted), attempt)
        self._each_job(("planned",), self._advance, progress)
