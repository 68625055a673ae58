"""What the parts of a batch run share: the stage's batch models with their clients, and the progress of a call."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nspec.compiler.providers.io import BatchClient, BatchView
from nspec.compiler.providers.registry import provider
from nspec.errors import MalformedResponse
from nspec.runners.ledger import Ledger
from nspec.runners.run_store import Run

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


class BatchStage:
    """One stage of a run as its batch models meet it: the run, its ledger, and each model's client and service."""

    def __init__(self, run: Run, ledger: Ledger, stage: str) -> None:
        self.run = run
        self.costing = run.costing(stage)
        self.ledger = ledger
        self.name = stage
        self.models = [m for m in run.models(stage) if m.mode == "batch"]
        # Every key and package is checked before anything is uploaded.
        creds = {m.label: m.credentials() for m in self.models}
        self.clients: dict[str, BatchClient] = {
            m.label: provider(m.provider).batches(creds[m.label]) for m in self.models
        }
        # Where each model's batches live (ids are unique at one service, not across services), for `claims`.
        self.services = {m.label: f"{m.provider} {creds[m.label].base_url or ''}" for m in self.models}

    @property
    def downloads(self) -> Path:
        """Where the stage's batch outputs land while they are parsed."""
        return self.run.paths.downloads(self.name)

    def poll(self, client: BatchClient, batch_id: str) -> BatchView:
        """The batch as the provider sees it, checked to be the one asked for (a proxy's mix-up must not steer a
        download to another batch)."""
        view = client.poll(batch_id)
        if view.batch_id != batch_id:
            raise MalformedResponse("batch", f"asked for batch {batch_id}, the answer is batch {view.batch_id}")
        return view
