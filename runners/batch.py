"""Batch runs: submit shards as provider batches, poll them, collect and normalise results, resubmit what is missing.

Crash safety. Every remote call is bracketed by ledger writes, so resuming after a kill at any point is safe:
- killed after an upload, before recording it: the file is uploaded again (files cost nothing; the orphan is inert);
- killed after a create call, before recording the batch: the job is in `creating`, and resuming asks the provider
  for the batch (`BatchClient.find`) before creating one. Where batches carry metadata (the run id, shard hash and
  attempt), the match is exact; where they carry none, the candidates are batches created after the recorded intent
  with the shard's request count and not already claimed by another job, and the first is adopted. Jobs are created
  one at a time, so a second candidate means someone else created a batch of the same size in the same minutes; the
  adopted batch is confirmed by its custom_ids when it is collected, and a batch whose custom_ids are not the shard's
  is released and the shard submitted again;
- killed while downloading or parsing: the job is not yet `collected`, so it is downloaded again; results already
  written are kept and not written twice (`ResultsFile`).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from nspec.errors import ProviderError
from nspec.providers import BatchClient, Outcome, credentials, provider
from nspec.runners.failpoints import failpoint
from nspec.runners.ledger import Job, Ledger
from nspec.runners.rundir import ResultsFile, Run, reconcile, record_outcome, register_shards, shard_lines


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


class BatchRunner:
    def __init__(self, run: Run, ledger: Ledger, stage: str = "answers") -> None:
        self.run = run
        self.costing = run.costing(stage)
        self.ledger = ledger
        self.stage = stage
        self.models = {m.label: m for m in run.models(stage)}
        self.batch_models = [m for m in self.models.values() if m.mode == "batch"]
        # Every key and package is checked before anything is uploaded.
        self.clients: dict[str, BatchClient] = {
            m.label: provider(m.provider).batches(credentials(m.entry)) for m in self.batch_models
        }

    def plan(self) -> None:
        """Record the compiled shards as jobs (once)."""
        register_shards(self.run, self.ledger, self.stage, self.batch_models)

    def submit(self, progress: Progress) -> None:
        self.plan()
        self._advance_all(("planned", "uploaded", "creating"), progress)

    def _advance_all(self, states: tuple[str, ...], progress: Progress) -> None:
        for job in self.ledger.jobs(self.stage, states):
            if job.model not in self.clients:
                continue
            try:
                self._advance(job, progress)
            except ProviderError as exc:  # transient: resumed next time (a refusal stops the run)
                self.ledger.update_job(job.id, error=f"{type(exc).__name__}: {exc}"[:500])

    def _metadata(self, job: Job, file_id: str | None) -> dict[str, str]:
        """What a batch carries to be found again: the run, the shard, the attempt, its requests and its file."""
        return {
            "nspec_run": self.run.run_id,
            "nspec_shard": job.shard_sha256[:40],
            "nspec_attempt": str(job.attempt),
            "requests": str(job.requests),
            **({"nspec_file": file_id} if file_id else {}),
        }

    def _advance(self, job: Job, progress: Progress) -> None:
        client = self.clients[job.model]
        if job.state == "creating":
            assert job.intent_at is not None
            claimed = self.ledger.known_batch_ids()
            candidates = [b for b in client.find(self._metadata(job, job.file_id), job.intent_at) if b not in claimed]
            if candidates:
                self.ledger.job_created(job.id, candidates[0])
                progress.adopted.append(candidates[0])
                return
        file_id = job.file_id
        if job.state == "planned" or file_id is None:
            file_id = client.upload(self.run.path / job.shard)
            failpoint("after-upload")
            self.ledger.update_job(job.id, state="uploaded", file_id=file_id)
        self.ledger.update_job(job.id, state="creating", intent_at=time.time())
        batch_id = client.create(file_id, self.run.path / job.shard, self._metadata(job, file_id))
        failpoint("after-create")
        self.ledger.job_created(job.id, batch_id)
        progress.created.append(batch_id)

    def collect(self, results: ResultsFile, progress: Progress) -> None:
        max_attempts, live_below = self.run.retry_policy()
        self._reconcile(results)
        for job in self.ledger.jobs(self.stage, ("created",)):
            try:
                self._collect_job(job, results, max_attempts, progress)
            except ProviderError as exc:  # transient: tried again next time (a refusal stops the run)
                self.ledger.update_job(job.id, error=f"{type(exc).__name__}: {exc}"[:500])
        self._resubmit(live_below, progress)

    def _collect_job(self, job: Job, results: ResultsFile, max_attempts: int, progress: Progress) -> None:
        client = self.clients[job.model]
        assert job.batch_id is not None
        view = client.poll(job.batch_id)
        self.ledger.update_job(job.id, provider_status=view.status)
        if not view.ended:
            return
        expected = self.ledger.submitted_to(job.id)
        if view.status == "failed":  # refused as a whole (validation): sending it again would fail again
            reason = client.failure(job.batch_id)
            for cid in sorted(expected):
                refused = Outcome(cid, "error", error={"code": "batch_failed", "message": reason}, retryable=False)
                self._final(results, job, refused, progress)
            self.ledger.update_job(job.id, state="failed", error=reason)
            return
        handled = 0
        for outcome in client.download(view, self.run.paths.downloads(self.stage)):
            if outcome.custom_id not in expected:
                continue  # a line already handled before an interruption, or a batch that is not ours
            expected.discard(outcome.custom_id)  # a second line for one request is not read
            self._handle(results, job, outcome, max_attempts, progress)
            if not handled:
                failpoint("during-download")
            handled += 1
        if expected and not handled and view.done:
            # An adopted batch whose custom_ids are not the shard's: release it and send the shard again.
            self.ledger.update_job(job.id, state="planned", batch_id=None, error="released: not our batch")
            return
        for cid in sorted(expected):  # in no file at all: count it as a failed attempt
            missing = Outcome(cid, "error", error={"code": "missing", "message": None})
            self._handle(results, job, missing, max_attempts, progress)
        self.ledger.update_job(job.id, state="collected", collected_at=time.time())

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
        if outcome.status == "ok" or not outcome.retryable or row["attempts"] >= max_attempts:
            self._final(results, job, outcome, progress)
        else:
            self.ledger.mark_retry([outcome.custom_id], row["shard"])

    def _final(self, results: ResultsFile, job: Job, outcome: Outcome, progress: Progress) -> None:
        source = {"kind": "batch", "batch_id": job.batch_id, "attempt": job.attempt}
        record_outcome(results, self.ledger, self.stage, job.model, outcome, source, self.costing)
        progress.collected += 1

    def _resubmit(self, live_below: int, progress: Progress) -> None:
        """Requests to retry: a small remainder goes live; the rest into new shards, submitted now."""
        for model in self.batch_models:
            rows = list(self.ledger.requests_in(self.stage, model.label, "retry"))
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
        self._advance_all(("planned",), progress)
