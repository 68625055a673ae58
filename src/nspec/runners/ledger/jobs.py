"""The ledger's jobs (a shard sent as one provider batch, or a model's live calls) and every batch made or found for
them; the folder's token that the batches carry."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from nspec.runners.ledger.store import LedgerStore
from nspec.secrets import redact

# Fields that hold a provider's words (a status, an error, a note): kept redacted (`nspec.secrets`) and short, since a
# gateway may echo the key it received in any of them.
_PROVIDER_WORDS = ("provider_status", "error", "note")


@dataclass(frozen=True)
class Job:
    id: int
    stage: str
    model: str
    provider: str
    shard: str
    shard_sha256: str
    requests: int
    attempt: int
    state: str
    file_id: str | None
    batch_id: str | None
    provider_status: str | None
    intent_at: float | None
    created_at: float | None
    error: str | None
    adopted: int
    error_repeats: int


@dataclass(frozen=True)
class Batch:
    """A provider batch on record (see the package's doc for its states)."""

    batch_id: str
    job_id: int
    stage: str
    model: str
    origin: (
        str  # created | adopted | surplus | seen (a candidate of an inexact search, not adopted, not ours to cancel)
    )
    state: str
    provider_status: str | None
    requests: int
    created_at: float
    note: str | None
    cost_usd: float | None


class JobRecords(LedgerStore):
    """Jobs and batches: each write its own transaction, made before and after the remote call it describes."""

    def add_job(
        self,
        stage: str,
        model: str,
        provider: str,
        shard: str,
        sha: str,
        custom_ids: list[str],
        attempt: int,
        state: str = "planned",
    ) -> None:
        """A job (`planned` for a batch, `live` for live calls) and its requests, if not recorded already."""
        self.flush()
        with self._transaction() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO jobs (stage, model, provider, shard, shard_sha256, requests, attempt, state)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (stage, model, provider, shard, sha, len(custom_ids), attempt, state),
            )
            if cur.rowcount:
                db.executemany(
                    "INSERT INTO requests (custom_id, stage, model, shard, state) VALUES (?, ?, ?, ?, 'pending')"
                    " ON CONFLICT (custom_id) DO UPDATE SET shard = excluded.shard",
                    [(cid, stage, model, shard) for cid in custom_ids],
                )

    def jobs(self, stage: str | None = None, states: tuple[str, ...] | None = None) -> list[Job]:
        sql, args = "SELECT * FROM jobs WHERE 1=1", []
        if stage:
            sql += " AND stage = ?"
            args.append(stage)
        if states:
            sql += f" AND state IN ({','.join('?' * len(states))})"
            args += list(states)
        rows = self.db.execute(sql + " ORDER BY id", args).fetchall()
        return [Job(**{k: row[k] for k in Job.__dataclass_fields__}) for row in rows]

    def update_job(self, job_id: int, **fields: Any) -> None:
        fields = {k: redact(v)[:500] if isinstance(v, str) and k in _PROVIDER_WORDS else v for k, v in fields.items()}
        names = ", ".join(f"{k} = ?" for k in fields)
        self._write(f"UPDATE jobs SET {names} WHERE id = ?", [*fields.values(), job_id])

    def job_failed(self, job_id: int, message: str, kind: str) -> None:
        """A call about the job failed: its error, counted when it is of the same ``kind`` as the last (the error's
        class and status: a provider's message often carries a request id of its own)."""
        self._write(
            "UPDATE jobs SET error_repeats = CASE WHEN error_kind = ?1 THEN error_repeats + 1 ELSE 1 END,"
            " error_kind = ?1, error = ?2 WHERE id = ?3",
            (kind, redact(message)[:500], job_id),
        )

    def job_created(self, job_id: int, batch_id: str, adopted: bool = False) -> None:
        """The create call returned (or, ``adopted``, its batch was found again): the job and its requests are now
        in the provider's hands, and the batch is on record for good."""
        self.flush()
        now = time.time()
        with self._transaction() as db:
            db.execute(
                "UPDATE jobs SET state = 'created', batch_id = ?, created_at = ?, adopted = ?, error = NULL,"
                " error_repeats = 0 WHERE id = ?",
                (batch_id, now, int(adopted), job_id),
            )
            db.execute(
                "INSERT OR REPLACE INTO batches (batch_id, job_id, stage, model, origin, state, requests, created_at)"
                " SELECT ?, id, stage, model, ?, 'open', requests, ? FROM jobs WHERE id = ?",
                (batch_id, "adopted" if adopted else "created", now, job_id),
            )
            db.execute(
                "UPDATE requests SET state = 'submitted', attempts = attempts + 1, job_id = ?"
                " WHERE custom_id IN (SELECT custom_id FROM requests WHERE state IN ('pending', 'retry')"
                " AND shard = (SELECT shard FROM jobs WHERE id = ?))",
                (job_id, job_id),
            )

    def job_released(self, job: Job, why: str) -> None:
        """The job's batch, adopted after a crash, is not its own: the batch stays on record as released, and the
        job goes back to be created again (its requests stay submitted to the job meanwhile)."""
        self.flush()
        with self._transaction() as db:
            db.execute("UPDATE batches SET state = 'released', note = ? WHERE batch_id = ?", (why, job.batch_id))
            db.execute("UPDATE jobs SET state = 'planned', batch_id = NULL, adopted = 0 WHERE id = ?", (job.id,))

    # -- batches -------------------------------------------------------------------------------------------------

    def add_batch(self, job: Job, batch_id: str, origin: str, state: str, created_at: float, note: str) -> None:
        """A batch found beside the job's own (a surplus one to cancel, or a candidate seen and left alone)."""
        self._write(
            "INSERT OR IGNORE INTO batches (batch_id, job_id, stage, model, origin, state, requests, created_at,"
            " note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (batch_id, job.id, job.stage, job.model, origin, state, job.requests, created_at, note),
        )

    def update_batch(self, batch_id: str, **fields: Any) -> None:
        fields = {k: redact(v)[:500] if isinstance(v, str) and k in _PROVIDER_WORDS else v for k, v in fields.items()}
        names = ", ".join(f"{k} = ?" for k in fields)
        self._write(f"UPDATE batches SET {names} WHERE batch_id = ?", [*fields.values(), batch_id])

    def batches(self, stage: str, states: tuple[str, ...] | None = None) -> list[Batch]:
        sql, args = "SELECT * FROM batches WHERE stage = ?", [stage]
        if states:
            sql += f" AND state IN ({','.join('?' * len(states))})"
            args += list(states)
        rows = self.db.execute(sql + " ORDER BY created_at, batch_id", args).fetchall()
        return [Batch(**{k: row[k] for k in Batch.__dataclass_fields__}) for row in rows]

    def known_batch_ids(self) -> set[str]:
        """Every batch id on record, whatever became of it."""
        return {row[0] for row in self.db.execute("SELECT batch_id FROM batches")}

    def folder_token(self) -> str:
        """This run folder's own token, made once: batches carry it where they carry metadata, so a folder never
        adopts a batch another folder of the same spec created."""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'folder'").fetchone()
        if row is not None:
            return str(row[0])
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('folder', ?)", (secrets.token_hex(8),))
        return str(self.db.execute("SELECT value FROM meta WHERE key = 'folder'").fetchone()[0])
