"""The ledger (`ledger.sqlite` in the run directory): every job (one shard sent as one provider batch), every
remote call's intent and result, every batch ever created or found, every request's state. Each write about a job is
its own committed transaction, made before and after the remote call it describes, so a process killed at any point
resumes without paying twice:

    job state     planned → uploaded → creating → created → collected      (or → failed, for a refused batch)
    request state pending → submitted → done | retry → submitted ... | failed (attempts used up)
    batch state   open → ended            a job's batch, polled until it ends, then collected
                  open → released         adopted after a crash, but its results are not the shard's: not ours
                  surplus → cancelling → cancelled   a second batch of one shard (a create whose answer was lost):
                                          cancelled, and its cost counted once it has ended

A job in `creating` is one whose create call may or may not have reached the provider: resuming looks for the batch
before creating another (see `runners.batch`). A job's last error (`error`, and how many times in a row it came
back, `error_repeats`) is kept until the job's next call succeeds: `status` and `--wait` show it.

A request's final state is committed in groups (`store.GROUP_ROWS` of them, or whatever `store.GROUP_SECONDS`
gathered): its result is already in the stage's results file, written first, and a start after a crash records again
from that file the results the ledger lacks (`runners.run_store.reconcile`). Every other write, and every read of
requests, commits the group first, so the ledger is never behind when the provider is told anything.
"""

from __future__ import annotations

from nspec.runners.ledger.jobs import Batch, Job, JobRecords
from nspec.runners.ledger.requests import RequestRecords

__all__ = ["Batch", "Job", "Ledger"]


class Ledger(JobRecords, RequestRecords):
    """A run directory's ledger: its jobs and their batches (`jobs`) and its requests (`requests`), over one
    connection (`store`) to tables of the schema's latest version (`schema`)."""
