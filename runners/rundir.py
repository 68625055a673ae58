"""A compiled run directory as the runners see it: manifest, resolved spec, cells, shards and results files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ruamel.yaml import YAML

from nspec.errors import UserError
from nspec.runners.ledger import Ledger

SCORING_OVERRIDE = "scoring.yaml"


@dataclass(frozen=True)
class RunModel:
    label: str
    provider: str
    mode: str  # batch | live
    entry: dict[str, Any]  # the model's entry of the resolved spec
    shards: list[dict[str, Any]]  # from the manifest: file, requests, bytes, sha256


class Run:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        manifest = self.path / "manifest.json"
        if not manifest.is_file():
            raise UserError(f"{path} is not a run directory (no manifest.json); compile a spec first")
        self.manifest: dict[str, Any] = json.loads(manifest.read_text("utf-8"))
        self.spec: dict[str, Any] = YAML(typ="safe", pure=True).load((self.path / "spec.yaml").read_text("utf-8"))
        override = self.path / SCORING_OVERRIDE
        if override.is_file():  # `nspec rescore` changed how this run is graded
            self.spec["scoring"] = YAML(typ="safe", pure=True).load(override.read_text("utf-8"))
        self.run_id: str = self.manifest["run_id"]

    def models(self, stage: str = "answers") -> list[RunModel]:
        """The models of a stage: the models under test (`answers`), or the judges (`judge`, once compiled)."""
        if stage == "answers":
            entries = {m.get("name", m["id"]): m for m in self.spec["models"]}
            listed = self.manifest["models"]
        else:
            manifest = self.path / stage / "manifest.json"
            if not manifest.is_file():
                return []
            listed = json.loads(manifest.read_text("utf-8"))["models"]
            entries = {m["label"]: m["entry"] for m in listed}
        return [
            RunModel(m["label"], m["id"].split("/", 1)[0], m["mode"], entries[m["label"]], m["shards"]) for m in listed
        ]

    def ledger(self) -> Ledger:
        return Ledger(self.path / "ledger.sqlite")

    def cells(self) -> Iterator[dict[str, Any]]:
        with open(self.path / "cells.jsonl", encoding="utf-8") as fh:
            for line in fh:
                yield json.loads(line)

    def retry_policy(self) -> tuple[int, int]:
        retry = self.spec.get("run", {}).get("retry", {})
        return int(retry.get("attempts", 3)), int(retry.get("live_below", 20))


def shard_lines(path: Path) -> Iterator[tuple[str, bytes]]:
    """(custom_id, raw line) of a request shard, streamed."""
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)["custom_id"], line


def register_shards(run: Run, ledger: Ledger, stage: str, models: list[RunModel], state: str = "planned") -> None:
    """Record the compiled shards of ``models`` in the ledger as jobs with their requests (once)."""
    known = {j.shard for j in ledger.jobs(stage)}
    for model in models:
        for shard in model.shards:
            if shard["file"] not in known:
                ids = [cid for cid, _ in shard_lines(run.path / shard["file"])]
                ledger.add_job(stage, model.label, model.provider, shard["file"], shard["sha256"], ids, 1, state)


class ResultsFile:
    """An append-only JSONL of final results keyed by cell_id. Opening repairs a line torn by a crash; results
    already present are never written again, so resuming after a crash between writing a result and recording it
    in the ledger cannot duplicate it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.ids: set[str] = set()
        if path.exists():
            self._repair()
            with open(path, encoding="utf-8") as fh:
                for line in fh:
                    self.ids.add(json.loads(line)["cell_id"])
        self._fh: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def _repair(self) -> None:
        with open(self.path, "rb+") as fh:
            data = fh.read()
            end = data.rfind(b"\n") + 1
            if end != len(data):
                fh.truncate(end)

    def append(self, record: dict[str, Any]) -> bool:
        """Write ``record`` unless its cell already has a result; True if written."""
        if record["cell_id"] in self.ids:
            return False
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._fh.flush()  # in the kernel's hands: survives the process being killed
        self.ids.add(record["cell_id"])
        return True

    def close(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
