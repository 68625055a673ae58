"""Batches of a shard beside its job's own: where the search for a lost create is exact they are ours, paid for and of
no use (cancelled, and their cost counted once they have ended); where it is not, they may be anyone's (noted, left
alone)."""

from __future__ import annotations

from nspec.compiler.providers.io import BatchClient, Outcome
from nspec.errors import ProviderError
from nspec.runners import claims
from nspec.runners.batch.stage import BatchStage
from nspec.runners.ledger import Job


class SurplusBatches:
    def __init__(self, stage: BatchStage) -> None:
        self.stage = stage

    def record(self, job: Job, client: BatchClient, found: list[tuple[str, float]]) -> None:
        """Other batches found for the job's shard, recorded (a surplus one claimed for this folder), then the
        surplus cancelled."""
        known = self.stage.ledger.known_batch_ids()
        for batch_id, created in found:
            if batch_id in known:
                continue
            if client.finds_exactly:
                self.stage.ledger.add_batch(job, batch_id, "surplus", "surplus", created, "a second batch of the shard")
                claims.claim(self.stage.services[job.model], batch_id, self.stage.run.path)
            else:
                note = "of the shard's size, created after the intent; not adopted, left alone"
                self.stage.ledger.add_batch(job, batch_id, "seen", "seen", created, note)
        self.cancel()

    def cancel(self) -> None:
        for batch in self.stage.ledger.batches(self.stage.name, ("surplus",)):
            client = self.stage.clients.get(batch.model)
            if client is None:
                continue
            try:
                client.cancel(batch.batch_id)
            except ProviderError as exc:  # cancelled at the next round
                self.stage.ledger.update_batch(batch.batch_id, note=f"cancel failed: {exc}"[:500])
            else:
                self.stage.ledger.update_batch(batch.batch_id, state="cancelling")

    def account(self) -> None:
        """A cancelled surplus batch, once ended, is downloaded for what it cost (its answers are not used)."""
        for batch in self.stage.ledger.batches(self.stage.name, ("cancelling",)):
            client = self.stage.clients.get(batch.model)
            if client is None:
                continue
            try:
                view = self.stage.poll(client, batch.batch_id)
                if not view.ended:
                    continue
                cost = 0.0
                for item in client.download(view, self.stage.downloads):
                    if isinstance(item, Outcome):
                        cost += self.stage.costing(batch.model, "batch", item.usage) or 0.0
            except ProviderError as exc:
                self.stage.ledger.update_batch(batch.batch_id, note=f"accounting failed: {exc}"[:500])
                continue
            self.stage.ledger.update_batch(
                batch.batch_id, state="cancelled", provider_status=view.status, cost_usd=cost
            )
