"""The ledger's requests: each one's state and attempts, what is left to send or to collect, and their counts."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any

from nspec.runners.ledger.store import LedgerStore


class RequestRecords(LedgerStore):
    """Requests: a read commits the group of final states first (`flush`) where it may hold what is read."""

    def awaiting(self, shard: str) -> int:
        """How many requests wait to be sent in ``shard`` (none: the job of that shard has nothing left to send)."""
        self.flush()
        row = self.db.execute(
            "SELECT COUNT(*) FROM requests WHERE shard = ? AND state IN ('pending', 'retry')", (shard,)
        ).fetchone()
        return int(row[0])

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
