"""Which run folder holds which batch, across the run folders of this machine (`batches.sqlite` in nspec's cache).

A run folder's ledger knows its own batches. Where a provider's batches carry no metadata (Anthropic's), a create
interrupted before its batch id was recorded is found again among batches of the shard's size created after the
intent — and another folder compiled from the same spec (the same custom ids, the same size) may have created one in
those minutes. Each folder claims here every batch it records, and adoption passes over a batch another folder
claimed.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from nspec.errors import UserError
from nspec.run_layout import cache_dir


@contextmanager
def _opened() -> Iterator[sqlite3.Connection]:
    """The claims' database, its table made; a file there that SQLite cannot use (damaged, not a database, not
    writable) is a `UserError` saying what to do: what it remembers is a convenience a new file starts over from."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "batches.sqlite"
    try:
        with closing(sqlite3.connect(path, timeout=30, isolation_level=None)) as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS claims (service TEXT NOT NULL, batch_id TEXT NOT NULL,"
                " folder TEXT NOT NULL, at REAL, PRIMARY KEY (service, batch_id))"
            )
            yield db
    except sqlite3.Error as exc:
        raise UserError(
            f"{path}: nspec's record of which run folder holds which batch cannot be used ({exc}): move it away "
            "or delete it, and run the same command again (what this run folder recorded is kept in its ledger)"
        ) from None


def claim(service: str, batch_id: str, folder: Path) -> None:
    """``folder`` holds ``batch_id`` of ``service`` (the provider and its address; the first claim stands)."""
    with _opened() as db:
        db.execute(
            "INSERT OR IGNORE INTO claims (service, batch_id, folder, at) VALUES (?, ?, ?, ?)",
            (service, batch_id, str(folder.resolve()), time.time()),
        )


def held_elsewhere(service: str, batch_ids: list[str], folder: Path) -> set[str]:
    """Those of ``batch_ids`` of ``service`` another run folder of this machine holds."""
    if not batch_ids:
        return set()
    with _opened() as db:
        marks = ",".join("?" * len(batch_ids))
        rows = db.execute(
            f"SELECT batch_id, folder FROM claims WHERE service = ? AND batch_id IN ({marks})", [service, *batch_ids]
        )
        mine = str(folder.resolve())
        return {batch_id for batch_id, holder in rows if holder != mine}
