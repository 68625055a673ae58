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

A request's final state is committed in groups (`GROUP_ROWS` of them, or whatever `GROUP_SECONDS` gathered): its
result is already in the stage's results file, written first, and a start after a crash records again from that file
the results the ledger lacks (`runners.run_store.reconcile`). Every other write, and every read of requests, commits the
group first, so the ledger is never behind when the provider is told anything.
"""

from __future__ import annotations

import errno
import itertools
import os
import secrets
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nspec.compiler.prices import Usage
from nspec.errors import UserError
from nspec.secrets import redact

# The ledger's schema, as ordered migrations: MIGRATIONS[i] brings a ledger from version i to i + 1, and the version
# reached is kept in SQLite's `user_version`. A ledger made before versions were recorded (tables, user_version 0)
# has the first migration's tables, which are written so that running it again changes nothing. Append new
# migrations; never edit one that has shipped, so a run directory made by this version opens in the next.
MIGRATIONS = (
    """
    CREATE TABLE IF NOT EXISTS jobs (
        id INTEGER PRIMARY KEY,
        stage TEXT NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        shard TEXT NOT NULL,
        shard_sha256 TEXT NOT NULL,
        requests INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        state TEXT NOT NULL,
        file_id TEXT,
        batch_id TEXT UNIQUE,
        provider_status TEXT,
        intent_at REAL,
        created_at REAL,
        collected_at REAL,
        error TEXT,
        UNIQUE (shard, attempt)
    );
    CREATE TABLE IF NOT EXISTS requests (
        custom_id TEXT PRIMARY KEY,
        stage TEXT NOT NULL,
        model TEXT NOT NULL,
        shard TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        job_id INTEGER,
        error TEXT,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        source TEXT
    );
    CREATE INDEX IF NOT EXISTS requests_by_state ON requests (stage, model, state);
    """,
    # 2: a created batch marks its shard's requests submitted; without this index that update scans every request.
    "CREATE INDEX requests_by_shard ON requests (shard, state);",
    # 3: the prompt cache's part of a request's input tokens, and what the request cost as its provider bills it
    # (priced request by request: a long-context tier applies per request, so sums of tokens cannot be priced).
    """
    ALTER TABLE requests ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE requests ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE requests ADD COLUMN cost_usd REAL;
    """,
    # 4: collecting a batch asks for its job's submitted requests; without this index each job scans its model's.
    "CREATE INDEX requests_by_job ON requests (job_id, state);",
    # 5: every batch ever created or found stays on record (a job's batch id is replaced when its batch is released);
    # whether a job's batch was adopted after a crash (only such a batch can turn out not to be ours); how often a
    # job's error came back in a row; a request's attempts before `--retry-errors` gave it a new budget; the
    # folder's own token (in batch metadata, so another folder's batches of the same spec are never taken for ours).
    """
    ALTER TABLE jobs ADD COLUMN adopted INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN error_repeats INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN error_kind TEXT;
    ALTER TABLE requests ADD COLUMN budget_from INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE batches (
        batch_id TEXT PRIMARY KEY,
        job_id INTEGER NOT NULL,
        stage TEXT NOT NULL,
        model TEXT NOT NULL,
        origin TEXT NOT NULL,
        state TEXT NOT NULL,
        provider_status TEXT,
        requests INTEGER NOT NULL,
        created_at REAL NOT NULL,
        note TEXT,
        cost_usd REAL
    );
    INSERT INTO batches (batch_id, job_id, stage, model, origin, state, provider_status, requests, created_at)
        SELECT batch_id, id, stage, model, 'created',
            CASE WHEN state IN ('collected', 'failed') THEN 'ended' ELSE 'open' END,
            provider_status, requests, COALESCE(created_at, 0)
        FROM jobs WHERE batch_id IS NOT NULL;
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
)
VERSION = len(MIGRATIONS)
# Fields that hold a provider's words (a status, an error, a note): kept redacted (`nspec.secrets`) and short, since a
# gateway may echo the key it received in any of them.
_PROVIDER_WORDS = ("provider_status", "error", "note")
GROUP_ROWS = 512  # final states committed together: one fsync for many results
GROUP_SECONDS = 1.0


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Bring the ledger at ``path`` to `VERSION`, one migration per transaction."""
    while True:
        with db:
            db.execute("BEGIN IMMEDIATE")  # one process migrates; another waits, then finds nothing left to do
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > VERSION:
                raise UserError(
                    f"{path}: this ledger has schema version {version}, made by a newer nspec (this one reads up "
                    f"to {VERSION}); upgrade nspec to continue this run"
                )
            if version == VERSION:
                return
            for statement in MIGRATIONS[version].split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {version + 1}")


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
    """A provider batch on record (see the module's doc for its states)."""

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


# What SQLite says when the file system, not the ledger, is at fault.
_STORAGE_FAULTS = {
    "database or disk is full": errno.ENOSPC,
    "attempt to write a readonly database": errno.EROFS,
    "unable to open database file": errno.EACCES,
    "disk I/O error": errno.EIO,
}


def _storage_fault(exc: sqlite3.Error, path: Path) -> Exception:
    """SQLite's error as the OS error it stands for (turned into `StorageError` naming the ledger), or as it is."""
    message = str(exc)
    code = next((code for text, code in _STORAGE_FAULTS.items() if text in message), None)
    if code is None:
        return exc
    return OSError(code, os.strerror(code), str(path))


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.db = sqlite3.connect(path, isolation_level=None, timeout=30)
        except sqlite3.Error as exc:
            raise _storage_fault(exc, path) from None
        self.db.row_factory = sqlite3.Row
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            migrate(self.db, path)
        except sqlite3.Error as exc:
            self.db.close()
            raise _storage_fault(exc, path) from None
        except BaseException:
            self.db.close()
            raise
        self._finished: dict[str, tuple[Any, ...]] = {}  # final states not yet committed, by custom_id
        self._since = 0.0  # when the oldest of them came

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.db.close()

    def flush(self) -> None:
        """Commit the final states gathered so far."""
        if not self._finished:
            return
        with self._transaction() as db:
            db.executemany(
                # A request sent again after a final state (`resend`) adds its new cost to what was paid before.
                "UPDATE requests SET state = ?1, error = ?2, input_tokens = ?3, output_tokens = ?4,"
                " cache_read_tokens = ?5, cache_write_tokens = ?6, cost_usd = CASE WHEN budget_from > 0 AND"
                " cost_usd IS NOT NULL THEN cost_usd + COALESCE(?7, 0) ELSE ?7 END, source = ?8 WHERE custom_id = ?9",
                self._finished.values(),
            )
        self._finished.clear()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One committed transaction; BEGIN IMMEDIATE, so a second writer waits for the first. A full, read-only or
        failing disk rolls it back and raises the OS error it stands for (the CLI names the ledger and what to do)."""
        try:
            with self.db:
                self.db.execute("BEGIN IMMEDIATE")
                yield self.db
        except sqlite3.OperationalError as exc:
            raise _storage_fault(exc, self.path) from None

    def _write(self, sql: str, args: Iterable[Any] = ()) -> sqlite3.Cursor:
        self.flush()
        with self._transaction() as db:
            return db.execute(sql, tuple(args))

    # -- jobs ----------------------------------------------------------------------------------------------------

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

    def awaiting(self, shard: str) -> int:
        """How many requests wait to be sent in ``shard`` (none: the job of that shard has nothing left to send)."""
        self.flush()
        row = self.db.execute(
            "SELECT COUNT(*) FROM requests WHERE shard = ? AND state IN ('pending', 'retry')", (shard,)
        ).fetchone()
        return int(row[0])

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

    # -- requests ------------------------------------------------------------------------------------------------

    def request_states(self, custom_ids: Iterable[str]) -> dict[str, sqlite3.Row]:
        custom_ids = list(custom_ids)
        if any(cid in self._finished for cid in custom_ids):
            self.flush()
        out = {}
        for cid in custom_ids:
            row = self.db.execute("SELECT * FROM requests WHERE custom_id = ?", (cid,)).fetchone()
            if row is not None:
                out[cid] = row
        return out

    def open_requests(self, custom_ids: Iterable[str]) -> dict[str, str]:
        """The model of each of ``custom_ids`` that has no final state yet, asked in chunks: a live stage of 100,000
        requests is never held as rows."""
        self.flush()
        found: dict[str, str] = {}
        ids = iter(custom_ids)
        while chunk := list(itertools.islice(ids, 500)):
            marks = ",".join("?" * len(chunk))
            for cid, model in self.db.execute(
                f"SELECT custom_id, model FROM requests WHERE custom_id IN ({marks})"
                " AND state NOT IN ('done', 'failed')",
                chunk,
            ):
                found[cid] = model
        return found

    def finish(
        self, custom_id: str, state: str, error: str | None, usage: Usage, cost_usd: float | None, source: str
    ) -> None:
        """A request's final state, its tokens (``usage``) and cost (None: its price is unknown); committed with its
        group (see the module's doc)."""
        if not self._finished:
            self._since = time.monotonic()
        self._finished[custom_id] = (
            state,
            error,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens + usage.cache_write_1h_tokens,
            cost_usd,
            source,
            custom_id,
        )
        if len(self._finished) >= GROUP_ROWS or time.monotonic() - self._since >= GROUP_SECONDS:
            self.flush()

    def mark_retry(self, custom_ids: list[str], shard: str) -> None:
        self.flush()
        with self._transaction() as db:
            db.executemany(
                "UPDATE requests SET state = 'retry', shard = ? WHERE custom_id = ?",
                [(shard, cid) for cid in custom_ids],
            )

    def final_requests(self, stage: str) -> Iterator[tuple[str, str, int | None, str]]:
        """(custom_id, source, job_id, model) of every request of ``stage`` with a final state, streamed."""
        self.flush()
        yield from self.db.execute(
            "SELECT custom_id, COALESCE(source, ''), job_id, model FROM requests"
            " WHERE stage = ? AND state IN ('done', 'failed')",
            (stage,),
        )

    def resend(self, custom_ids: list[str]) -> None:
        """Send these requests again, whatever their final state, with a new budget of attempts (their attempts so
        far kept on record): a retryable error asked again (`--retry-errors`), a result lost from the results file."""
        self.flush()
        with self._transaction() as db:
            db.executemany(
                "UPDATE requests SET state = 'retry', budget_from = attempts, error = NULL WHERE custom_id = ?",
                [(cid,) for cid in custom_ids],
            )

    def submitted_to(self, job_id: int) -> set[str]:
        """The requests a job holds that have no final state yet."""
        self.flush()
        rows = self.db.execute("SELECT custom_id FROM requests WHERE job_id = ? AND state = 'submitted'", (job_id,))
        return {row[0] for row in rows}

    def requests_in(self, stage: str, model: str, state: str) -> Iterator[sqlite3.Row]:
        self.flush()
        yield from self.db.execute(
            "SELECT * FROM requests WHERE stage = ? AND model = ? AND state = ? ORDER BY custom_id",
            (stage, model, state),
        )

    def counts(self, stage: str) -> dict[str, dict[str, Any]]:
        """Per model: requests by state, and tokens so far."""
        self.flush()
        out: dict[str, dict[str, Any]] = {}
        for row in self.db.execute(
            "SELECT model, state, COUNT(*) AS n, SUM(input_tokens) AS i, SUM(output_tokens) AS o,"
            " SUM(cache_read_tokens) AS r, SUM(cache_write_tokens) AS w, SUM(cost_usd) AS usd,"
            " COUNT(cost_usd) AS priced FROM requests WHERE stage = ? GROUP BY model, state",
            (stage,),
        ):
            entry = out.setdefault(
                row["model"],
                {
                    "states": {},
                    "input_tokens": 0,
                    "output_tokens": 0,
                    "cache_read_tokens": 0,
                    "cache_write_tokens": 0,
                    "cost_usd": 0.0,
                    "unpriced": 0,
                },
            )
            entry["states"][row["state"]] = row["n"]
            entry["input_tokens"] += row["i"] or 0
            entry["output_tokens"] += row["o"] or 0
            entry["cache_read_tokens"] += row["r"] or 0
            entry["cache_write_tokens"] += row["w"] or 0
            entry["cost_usd"] += row["usd"] or 0.0
            if row["state"] in ("done", "failed"):
                entry["unpriced"] += row["n"] - row["priced"]
        return out
