"""Creating a job's batch, each remote call bracketed by ledger writes (see the package's doc): the upload, the intent,
the create; and, for a job whose create may have reached the provider, the search for its batch before another."""

from __future__ import annotations

import time

from nspec.compiler.providers.io import BatchClient
from nspec.runners import claims
from nspec.runners.batch.stage import BatchStage, Progress
from nspec.runners.batch.surplus import SurplusBatches
from nspec.runners.failpoints import failpoint
from nspec.runners.ledger import Job


class BatchCreator:
    def __init__(self, stage: BatchStage, surplus: SurplusBatches) -> None:
        self.stage = stage
        self.surplus = surplus

    def advance(self, job: Job, progress: Progress) -> None:
        """Take an unsent job as far as its batch: adopted if an earlier create made one, else uploaded and created;
        superseded if its requests were all answered meanwhile."""
        client = self.stage.clients[job.model]
        if job.state == "creating" and self._adopt(job, client, progress):
            return
        if not self.stage.ledger.awaiting(job.shard):  # its requests were answered elsewhere meanwhile: nothing to send
            self.stage.ledger.update_job(job.id, state="superseded", error=None, error_repeats=0, error_kind=None)
            return
        file_id = job.file_id
        if job.state == "planned" or file_id is None:
            file_id = client.upload(self.stage.run.path / job.shard)
            failpoint("after-upload")
            self.stage.ledger.update_job(job.id, state="uploaded", file_id=file_id)
        tried_before = job.intent_at is not None
        self.stage.ledger.update_job(job.id, state="creating", intent_at=time.time())
        batch_id = client.create(file_id, self.stage.run.path / job.shard, self._metadata(job, file_id))
        failpoint("after-create")
        self._created(job, batch_id)
        progress.created.append(batch_id)
        if tried_before and client.finds_exactly:  # an earlier create of this job may have made a batch after all
            found = client.find(self._metadata(job, file_id), job.intent_at or 0.0)
            self.surplus.record(job, client, [(b, t) for b, t in found if b != batch_id])

    def _metadata(self, job: Job, file_id: str | None) -> dict[str, str]:
        """What a batch carries to be found again: the folder, the run, the shard, the attempt, its requests and its
        file."""
        return {
            "nspec_folder": self.stage.ledger.folder_token(),
            "nspec_run": self.stage.run.run_id,
            "nspec_shard": job.shard_sha256[:40],
            "nspec_attempt": str(job.attempt),
            "requests": str(job.requests),
            **({"nspec_file": file_id} if file_id else {}),
        }

    def _created(self, job: Job, batch_id: str, adopted: bool = False) -> None:
        self.stage.ledger.job_created(job.id, batch_id, adopted)
        claims.claim(self.stage.services[job.model], batch_id, self.stage.run.path)

    def _adopt(self, job: Job, client: BatchClient, progress: Progress) -> bool:
        """Find the batch of a create that may have reached the provider; True if one was adopted."""
        assert job.intent_at is not None
        found = client.find(self._metadata(job, job.file_id), job.intent_at)
        known = self.stage.ledger.known_batch_ids()
        elsewhere = claims.held_elsewhere(self.stage.services[job.model], [b for b, _ in found], self.stage.run.path)
        fresh = [(b, t) for b, t in found if b not in known and b not in elsewhere]
        if not fresh:
            return False
        # The earliest created after the intent first; then those within the clock skew before it, latest first.
        after = sorted((c for c in fresh if c[1] >= job.intent_at), key=lambda c: c[1])
        before = sorted((c for c in fresh if c[1] < job.intent_at), key=lambda c: -c[1])
        (chosen, _), *rest = after + before
        self._created(job, chosen, adopted=True)
        progress.adopted.append(chosen)
        self.surplus.record(job, client, rest)
        return True
