"""The emulator's clock and store: uploaded files and batches, optionally kept on disk across restarts."""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
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
    """Files (metadata here, bytes on disk or in memory) and batches (plain dicts, owned by the batch modules)."""

    state_dir: Path | None = None
    files: dict[str, StoredFile] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
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
        store = cls(Path(state_dir) if state_dir else None)
        if store.state_dir is not None:
            (store.state_dir / "files").mkdir(parents=True, exist_ok=True)
            index = store.state_dir / "state.json"
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
        with self.lock:
            stored = StoredFile(file_id or new_id(prefix), filename, purpose, created_at, len(data))
            self.files[stored.id] = stored
            if self.state_dir is not None:
                (self.state_dir / "files" / stored.id).write_bytes(data)
            else:
                self.blobs[stored.id] = data
            self.save()
            return stored

    def read_file(self, file_id: str) -> bytes:
        if self.state_dir is not None:
            return (self.state_dir / "files" / file_id).read_bytes()
        return self.blobs[file_id]

    def delete_file(self, file_id: str) -> None:
        with self.lock:
            del self.files[file_id]
            if self.state_dir is not None:
                (self.state_dir / "files" / file_id).unlink(missing_ok=True)
            else:
                self.blobs.pop(file_id, None)
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
