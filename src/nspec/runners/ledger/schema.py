"""The ledger's tables, and how a ledger made by an earlier nspec is brought up to them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

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
