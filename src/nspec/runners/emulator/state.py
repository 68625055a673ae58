"""The emulator's clock and store: uploaded files and batches, optionally kept on disk across restarts."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nspec.runners.emulator.caching import PromptCaches


class Clock:
    """Wall time plus an offset that tests can advance, to jump to a batch's expiry without waiting."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    created_at: int
    size: int

    def as_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.size,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


@dataclass
class Store:
    """Files (metadata here, bytes on disk: a batch of 100,000 requests is read and written a line at a time) and
    batches (plain dicts, owned by the batch modules). With a state folder, the index is kept there too and a restart
    finds every batch and file; without one, the bytes go to a private temporary folder removed with the store."""

    files_dir: Path
    state_dir: Path | None = None
    files: dict[str, StoredFile] = field(default_factory=dict)
    openai_batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    anthropic_batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    google_batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    mistral_batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    together_batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    uploads: dict[str, dict[str, Any]] = field(default_factory=dict)  # resumable uploads under way (Google's)
    caches: PromptCaches = field(default_factory=PromptCaches)  # the providers' prompt caches (not saved)
    lock: threading.RLock = field(default_factory=threading.RLock)

    @classmethod
    def open(cls, state_dir: str | None) -> Store:
        if state_dir is None:
            scratch = tempfile.mkdtemp(prefix="nspec-emulator-")
            store = cls(Path(scratch))
            weakref.finalize(store, shutil.rmtree, scratch, ignore_errors=True)
            return store
        folder = Path(state_dir)
        store = cls(folder / "files", folder)
        store.files_dir.mkdir(parents=True, exist_ok=True)
        index = folder / "state.json"
        if index.is_file():
            data = json.loads(index.read_text("utf-8"))
            store.files = {k: StoredFile(**v) for k, v in data["files"].items()}
            store.openai_batches = data["openai_batches"]
            store.anthropic_batches = data["anthropic_batches"]
            store.google_batches = data.get("google_batches", {})
            store.mistral_batches = data.get("mistral_batches", {})
            store.together_batches = data.get("together_batches", {})
        return store

    def put_file(
        self, filename: str, purpose: str, data: bytes, created_at: int, prefix: str = "file-", file_id: str = ""
    ) -> StoredFile:
        """Keep a file (under ``file_id`` when the API chose it before the bytes came: Together's upload)."""
        scratch = self.scratch_path()
        scratch.write_bytes(data)
        return self.adopt(scratch, filename, purpose, created_at, prefix, file_id)

    def scratch_path(self) -> Path:
        """A fresh path in the store's folder, to write a file into before `adopt` keeps it."""
        return self.files_dir / new_id("part-")

    def adopt(
        self, path: Path, filename: str, purpose: str, created_at: int, prefix: str = "file-", file_id: str = ""
    ) -> StoredFile:
        """Keep the file written at ``path`` (in the store's folder) as a stored file."""
        with self.lock:
            stored = StoredFile(file_id or new_id(prefix), filename, purpose, created_at, path.stat().st_size)
            os.replace(path, self.path(stored.id))
            self.files[stored.id] = stored
            self.save()
            return stored

    def path(self, file_id: str) -> Path:
        return self.files_dir / file_id

    def read_file(self, file_id: str) -> bytes:
        return self.path(file_id).read_bytes()

    def delete_file(self, file_id: str) -> None:
        with self.lock:
            del self.files[file_id]
            self.path(file_id).unlink(missing_ok=True)
            self.save()

    def add_batch(self, table: dict[str, dict[str, Any]], batch: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            table[batch["id"]] = batch
            self.save()
        return batch

    def save(self) -> None:
        """Write the index atomically (a restart then finds every batch and file)."""
        if self.state_dir is None:
            return
        with self.lock:
            data = {
                "files": {k: asdict(v) for k, v in self.files.items()},
                "openai_batches": self.openai_batches,
                "anthropic_batches": self.anthropic_batches,
                "google_batches": self.google_batches,
                "mistral_batches": self.mistral_batches,
                "together_batches": self.together_batches,
            }
            tmp = self.state_dir / "state.json.tmp"
            tmp.write_text(json.dumps(data), "utf-8")
            os.replace(tmp, self.state_dir / "state.json")
