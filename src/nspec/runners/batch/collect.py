"""Collecting a job's batch: polled until it ends, its results downloaded and recorded, a request without a usable
result sent again while its attempts last (see the package's doc); and the results of batches written again where
the results file lost them, or recorded where the ledger did."""

from __future__ import annotations

import time
from typing import Any

from nspec.compiler.providers.io import BadLine, Outcome
from nspec.errors import Gone
from nspec.runners.batch.stage import BatchStage, Progress
from nspec.runners.failpoints import failpoint
from nspec.runners.ledger import Job
from nspec.runners.run_store import Lost, ResultsFile, reconcile, record_outcome, result_record


class BatchCollector:
    def __init__(self, stage: BatchStage) -> None:
        self.stage = stage

    def collect(self, job: Job, results: ResultsFile, max_attempts: int, progress: Progress) -> None:
        """Poll the job's batch and, once it has ended, record its results: a refused batch fails its requests, an
        adopted one whose results are not the shard's is released, and a request without a usable line is missing."""
        client = self.stage.clients[job.model]
        assert job.batch_id is not None
        gone: str | None = None
        try:
            view = self.stage.poll(client, job.batch_id)
        except Gone as exc:  # the batch itself is gone: its results will never come
            self._missing(results, job, self.stage.ledger.submitted_to(job.id), {}, max_attempts, progress, str(exc))
            return
        self.stage.ledger.update_job(job.id, provider_status=view.status)
        self.stage.ledger.update_batch(job.batch_id, provider_status=view.status)
        if not view.ended:
            return
        expected = self.stage.ledger.submitted_to(job.id)
        if view.status == "failed":  # refused as a whole (validation): sending it again would fail again
            reason = client.failure(job.batch_id)
            for cid in sorted(expected):
                refused = Outcome(cid, "error", error={"code": "batch_failed", "message": reason}, retryable=False)
                self._final(results, job, refused, progress)
            self.stage.ledger.update_job(job.id, state="failed")
            self.stage.ledger.update_batch(job.batch_id, state="ended", note=reason)
            return
        handled = bad_count = 0
        bad: dict[str, BadLine] = {}  # the bad line of each request that has no good one
        first_bad: BadLine | None = None
        try:
            for item in client.download(view, self.stage.downloads):
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
            self.stage.ledger.job_released(job, f"released batch {job.batch_id}: its results are not this shard's")
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
        self.stage.ledger.update_job(job.id, state="collected", collected_at=time.time())
        assert job.batch_id is not None
        self.stage.ledger.update_batch(job.batch_id, state="ended", note=note)
        if note is not None:
            progress.errors[f"{job.model} ({job.batch_id})"] = note

    def _handle(self, results: ResultsFile, job: Job, outcome: Outcome, max_attempts: int, progress: Progress) -> None:
        row = self.stage.ledger.request_states([outcome.custom_id])[outcome.custom_id]
        if row["state"] in ("done", "failed"):
            return
        attempts = row["attempts"] - row["budget_from"]
        if outcome.status == "ok" or not outcome.retryable or attempts >= max_attempts:
            self._final(results, job, outcome, progress)
        else:
            self.stage.ledger.mark_retry([outcome.custom_id], row["shard"])

    def _final(self, results: ResultsFile, job: Job, outcome: Outcome, progress: Progress) -> None:
        source = {"kind": "batch", "batch_id": job.batch_id, "attempt": job.attempt}
        record_outcome(results, self.stage.ledger, self.stage.name, job.model, outcome, source, self.stage.costing)
        progress.collected += 1

    def restore(self, results: ResultsFile, lost: dict[str, Lost]) -> int:
        """Write again, from their batches' output files, the results of ``lost`` that came from a batch; the ledger
        already has them. Returns how many."""
        by_job: dict[int, set[str]] = {}
        for cid, missing in lost.items():
            if missing.source == "batch" and missing.job_id is not None:
                by_job.setdefault(missing.job_id, set()).add(cid)
        restored = 0
        for job in self.stage.ledger.jobs(self.stage.name):
            wanted = by_job.get(job.id)
            if not wanted or job.batch_id is None or job.model not in self.stage.clients:
                continue
            client = self.stage.clients[job.model]
            came: dict[str, Any] = {"kind": "batch", "batch_id": job.batch_id, "attempt": job.attempt}
            try:
                view = self.stage.poll(client, job.batch_id)
                if not view.ended:
                    continue
                for item in client.download(view, self.stage.downloads):
                    if isinstance(item, Outcome) and item.custom_id in wanted:
                        wanted.discard(item.custom_id)
                        restored += results.append(result_record(self.stage.name, job.model, item, came))
            except Gone:  # what it held cannot be fetched again: left lost, to be sent again on request
                continue
        return restored

    def reconcile(self, results: ResultsFile) -> None:
        """Results written before a crash that the ledger does not know as final yet."""
        unsettled = (  # streamed from the ledger: the results file's ids are the set it is matched against
            row["custom_id"]
            for model in self.stage.models
            for state in ("submitted", "retry", "pending")
            for row in self.stage.ledger.requests_in(self.stage.name, model.label, state)
        )
        reconcile(results, self.stage.ledger, unsettled, self.stage.costing)
