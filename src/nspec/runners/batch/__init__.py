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

from collections.abc import Callable
from pathlib import Path

from nspec.errors import ProviderError, Refused
from nspec.runners.batch.collect import BatchCollector
from nspec.runners.batch.create import BatchCreator
from nspec.runners.batch.retry import plan_retries
from nspec.runners.batch.stage import UNSENT, BatchStage, Progress
from nspec.runners.batch.surplus import SurplusBatches
from nspec.runners.ledger import Job, Ledger
from nspec.runners.run_store import Lost, ResultsFile, Run, register_shards

__all__ = ["BatchRunner", "Progress"]


class BatchRunner:
    """A stage's batch models through a submit or a collect: the parts (`create`, `collect`, `surplus`, `retry`) in
    their order, each job on its own."""

    def __init__(self, run: Run, ledger: Ledger, stage: str = "answers") -> None:
        self.stage = BatchStage(run, ledger, stage)
        self.surplus = SurplusBatches(self.stage)
        self.creator = BatchCreator(self.stage, self.surplus)
        self.collector = BatchCollector(self.stage)

    def plan(self) -> None:
        """Record the compiled shards as jobs (once)."""
        register_shards(self.stage.run, self.stage.ledger, self.stage.name, self.stage.models)

    def submit(self, progress: Progress) -> None:
        self.plan()
        self._each_job(UNSENT, self.creator.advance, progress)

    def collect(self, results: ResultsFile, progress: Progress) -> None:
        max_attempts, live_below = self.stage.run.retry_policy()
        self.collector.reconcile(results)
        self.surplus.cancel()
        # Jobs whose upload or create failed before are tried again: a persistent failure stays in sight on the job.
        self._each_job(UNSENT, self.creator.advance, progress)
        collect = lambda job, p: self.collector.collect(job, results, max_attempts, p)  # noqa: E731
        self._each_job(("created",), collect, progress)
        self.surplus.account()
        # Requests to retry: a small remainder goes live; the rest into new shards, submitted now.
        plan_retries(self.stage, live_below, progress)
        self._each_job(("planned",), self.creator.advance, progress)

    def restore(self, results: ResultsFile, lost: dict[str, Lost]) -> int:
        """Write again the results of ``lost`` that came from a batch (`BatchCollector.restore`); how many."""
        return self.collector.restore(results, lost)

    def _each_job(self, states: tuple[str, ...], step: Callable[[Job, Progress], None], progress: Progress) -> None:
        """Run ``step`` on every job of the stage in ``states``, each on its own: a failure is recorded on its job
        (and said in ``progress.errors``) and the others go on; a refusal stops its model's jobs and is raised once
        the other models' had their turn."""
        refused: Refused | None = None
        stopped: set[str] = set()
        for job in self.stage.ledger.jobs(self.stage.name, states):
            if job.model not in self.stage.clients or job.model in stopped:
                continue
            try:
                step(job, progress)
            except (ProviderError, Refused) as exc:
                message, kind = f"{type(exc).__name__}: {exc}", f"{type(exc).__name__} {exc.status or ''}".strip()
                self.stage.ledger.job_failed(job.id, message, kind)
                progress.errors[f"{job.model} ({job.batch_id or Path(job.shard).name})"] = message
                progress.failing.add(f"{job.model}: {kind}")
                if isinstance(exc, Refused):
                    stopped.add(job.model)
                    refused = refused or exc
            else:
                if job.error is not None:  # its calls go through again
                    self.stage.ledger.update_job(job.id, error=None, error_repeats=0, error_kind=None)
        if refused is not None:
            raise refused
