"""The ledger's connection: opened at the schema's version, written one committed transaction at a time, and the
group of final states that every other write, and every read of requests, commits first (see the package's doc)."""

from __future__ import annotations

import errno
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nspec.compiler.prices import Usage
from nspec.runners.ledger.schema import migrate

GROUP_ROWS = 512  # final states committed together: one fsync for many results
GROUP_SECONDS = 1.0

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


class LedgerStore:
    """The connection the ledger's records share (`JobRecords`, `RequestRecords`), and the writes they make on it."""

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

    def finish(
        self, custom_id: str, state: str, error: str | None, usage: Usage, cost_usd: float | None, source: str
    ) -> None:
        """A request's final state, its tokens (``usage``) and cost (None: its price is unknown); committed with its
        group (see the package's doc)."""
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
