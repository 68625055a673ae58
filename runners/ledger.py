"""The ledger (`ledger.sqlite` in the run directory): every job (one shard sent as one provider batch), every
remote call's intent and result, every request's state. Each write about a job is its own committed transaction,
made before and after the remote call it describes, so a process killed at any point resumes without paying twice:

    job state     planned → uploaded → creating → created → collected      (or → failed, for a refused batch)
    request state pending → submitted → done | retry → submitted ... | failed (attempts used up)

A job in `creating` is one whose create call may or may not have reached the provider: resuming looks for the batch
before creating another (see `runners.batch`).

A request's final state is committed in groups (`GROUP_ROWS` of them, or whatever `GROUP_SECONDS` gathered): its
result is already in the stage's results file, written first, and a start after a crash records again from that file
the results the ledger lacks (`runners.rundir.reconcile`). Every other write, and every read of requests, commits the
group first, so the ledger is never behind when the provider is told anything.
"""

from __future__ import annotations

import errno
import itertools
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nspec.compiler.prices import Usage
from nspec.errors import UserError

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
)
VERSION = len(MIGRATIONS)
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
                "UPDATE requests SET state = ?, error = ?, input_tokens = ?, output_tokens = ?, cache_read_tokens = ?,"
                " cache_write_tokens = ?, cost_usd = ?, source = ? WHERE custom_id = ?",
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
        names = ", ".join(f"{k} = ?" for k in fields)
        self._write(f"UPDATE jobs SET {names} WHERE id = ?", [*fields.values(), job_id])

    def job_created(self, job_id: int, batch_id: str) -> None:
        """The create call returned: the job and its requests are now in the provider's hands."""
        self.flush()
        with self._transaction() as db:
            db.execute(
                "UPDATE jobs SET state = 'created', batch_id = ?, created_at = ? WHERE id = ?",
                (batch_id, time.time(), job_id),
            )
            db.execute(
                "UPDATE requests SET state = 'submitted', attempts = attempts + 1, job_id = ?"
                " WHERE custom_id IN (SELECT custom_id FROM requests WHERE state IN ('pending', 'retry')"
                " AND shard = (SELECT shard FROM jobs WHERE id = ?))",
                (job_id, job_id),
            )

    def known_batch_ids(self) -> set[str]:
        return {row[0] for row in self.db.execute("SELECT batch_id FROM jobs WHERE batch_id IS NOT NULL")}

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
