"""The ledger's schema version and ordered migrations: a run directory made by an earlier nspec opens in this one."""

from __future__ import annotations

import sqlite3

import pytest

from nspec.errors import UserError
from nspec.runners.ledger import Ledger
from nspec.runners.ledger.schema import MIGRATIONS, VERSION


def indexes(path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")}


def test_a_new_ledger_is_at_the_current_version(tmp_path):
    Ledger(tmp_path / "ledger.sqlite").close()
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == VERSION
    assert {"requests_by_state", "requests_by_shard"} <= indexes(tmp_path / "ledger.sqlite")


def test_a_ledger_from_before_versions_is_migrated_with_its_rows(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with sqlite3.connect(path) as db:  # as the first release wrote it: its tables, no version, one job in flight
        db.executescript(MIGRATIONS[0])
        db.execute(
            "INSERT INTO jobs (stage, model, provider, shard, shard_sha256, requests, attempt, state)"
            " VALUES ('answers', 'openai/gpt-4.1-mini', 'openai', 'answers/requests/a.jsonl', 'x', 2, 1, 'planned')"
        )
        db.executemany(
            "INSERT INTO requests (custom_id, stage, model, shard, state) VALUES (?, 'answers', ?, ?, 'pending')",
            [(cid, "openai/gpt-4.1-mini", "answers/requests/a.jsonl") for cid in ("c1", "c2")],
        )
    assert "requests_by_shard" not in indexes(path)
    ledger = Ledger(path)
    try:
        job = ledger.jobs("answers")[0]
        ledger.job_created(job.id, "batch_1")  # the migrated ledger works as a new one
        assert {r["state"] for r in ledger.requests_in("answers", "openai/gpt-4.1-mini", "submitted")} == {"submitted"}
    finally:
        ledger.close()
    assert "requests_by_shard" in indexes(path)
    Ledger(path).close()  # opening again changes nothing


def test_a_ledger_from_a_newer_nspec_is_refused(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {VERSION + 1}")
    with pytest.raises(UserError, match=f"schema version {VERSION + 1}, made by a newer nspec"):
        Ledger(path)
