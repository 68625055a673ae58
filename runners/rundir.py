"""A compiled run directory as the runners see it: manifest, resolved spec, cells, shards and results files."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ruamel.yaml import YAML

from nspec import jsonl
from nspec.errors import RunBusy, UserError
from nspec.providers import Outcome
from nspec.records import CellRecord, Manifest, ResultRecord, ScoreRecord, Shard
from nspec.rundir import RunPaths
from nspec.runners.ledger import Ledger


@dataclass(frozen=True)
class RunModel:
    label: str
    provider: str
    mode: str  # batch | live
    entry: dict[str, Any]  # the model's entry of the resolved spec
    shards: list[Shard]  # from the manifest


class Run:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.paths = run_paths(self.path)
        self.manifest: Manifest = json.loads(self.paths.manifest.read_text("utf-8"))
        self.spec: dict[str, Any] = YAML(typ="safe", pure=True).load(self.paths.spec.read_text("utf-8"))
        override = self.paths.scoring_override
        if override.is_file():  # `nspec rescore` changed how this run is graded
            self.spec["scoring"] = YAML(typ="safe", pure=True).load(override.read_text("utf-8"))
        self.run_id: str = self.manifest["run_id"]

    def models(self, stage: str = "answers") -> list[RunModel]:
        """The models of a stage: the models under test (`answers`), or the judges (`judge`, once compiled)."""
        if stage == "answers":
            entries = {m.get("name", m["id"]): m for m in self.spec["models"]}
            listed = self.manifest["models"]
        else:
            manifest = self.stage_manifest(stage)
            if manifest is None:
                return []
            listed = manifest["models"]
            entries = {m["label"]: m["entry"] for m in listed}
        return [
            RunModel(m["label"], m["id"].split("/", 1)[0], m["mode"], entries[m["label"]], m["shards"]) for m in listed
        ]

    def ledger(self) -> Ledger:
        return Ledger(self.paths.ledger)

    def cells(self) -> Iterator[CellRecord]:
        """The cells, a line at a time."""
        return jsonl.read(self.paths.cells)  # type: ignore[return-value]

    def results(self, stage: str = "answers") -> Iterator[ResultRecord]:
        """A stage's final results so far, a line at a time."""
        return jsonl.read(self.paths.results(stage))  # type: ignore[return-value]

    def scores(self) -> Iterator[ScoreRecord]:
        """The scores so far, a line at a time."""
        return jsonl.read(self.paths.scores)  # type: ignore[return-value]

    def stage_manifest(self, stage: str) -> dict[str, Any] | None:
        """The manifest of a stage compiled after the answers (the judges'), once compiled."""
        path = self.paths.stage_manifest(stage)
        return json.loads(path.read_text("utf-8")) if path.is_file() else None

    def retry_policy(self) -> tuple[int, int]:
        retry = self.spec.get("run", {}).get("retry", {})
        return int(retry.get("attempts", 3)), int(retry.get("live_below", 20))


def run_paths(root: Path) -> RunPaths:
    """The paths of the run directory ``root``, once it is one."""
    paths = RunPaths(root)
    if not paths.manifest.is_file():
        raise UserError(f"{root} is not a run directory (no manifest.json); compile a spec first")
    return paths


_held: set[Path] = set()  # run directories this process works in now


@contextmanager
def exclusive(root: Path) -> Iterator[None]:
    """Work in the run directory ``root`` as the only process doing so: two processes submitting or collecting at
    once would each send what the other is sending. The lock is the kernel's (flock), so a killed holder leaves
    none behind; nested calls in one process (`run` → `submit`) share it."""
    key = root.resolve()
    if key in _held:
        yield
        return
    paths = run_paths(root)
    with open(paths.lock, "a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            raise RunBusy(
                f"{root}: another nspec process (pid {holder}) is working in this run directory; "
                "run again when it is done"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        _held.add(key)
        try:
            yield
        finally:
            _held.discard(key)
            fcntl.flock(fh, fcntl.LOCK_UN)


def shard_lines(path: Path) -> Iterator[tuple[str, bytes]]:
    """(custom_id, raw line) of a request shard, streamed."""
    for request, line in jsonl.read_raw(path):
        yield request["custom_id"], line


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
            self.ids = {record["cell_id"] for record in jsonl.read(path)}
        self._fh: IO[bytes] = open(path, "ab")  # noqa: SIM115 - closed in close()

    def _repair(self) -> None:
        with open(self.path, "rb+") as fh:
            data = fh.read()
            end = data.rfind(b"\n") + 1
            if end != len(data):
                fh.truncate(end)

    def append(self, record: ResultRecord) -> bool:
        """Write ``record`` unless its cell already has a result; True if written."""
        if record["cell_id"] in self.ids:
            return False
        self._fh.write(jsonl.encode(record))
        self._fh.flush()  # in the kernel's hands: survives the process being killed
        self.ids.add(record["cell_id"])
        return True

    def close(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()


def record_outcome(
    results: ResultsFile, ledger: Ledger, stage: str, model: str, outcome: Outcome, source: dict[str, Any]
) -> bool:
    """A request's final outcome: its line in the stage's results file, then its state in the ledger (in that
    order, so a crash between the two is repaired from the file on the next start). ``source["kind"]`` says how
    it was obtained. False, with nothing written, when the cell has a result already."""
    record: ResultRecord = {
        "cell_id": outcome.custom_id,
        "stage": stage,
        "model": model,
        "status": outcome.status,
        "text": outcome.text,
        "finish_reason": outcome.finish_reason,
        "usage": {"input_tokens": outcome.input_tokens, "output_tokens": outcome.output_tokens},
        "error": outcome.error,
        "source": source,
    }
    if not results.append(record):
        return False
    state = "done" if outcome.status == "ok" else "failed"
    error = None if outcome.error is None else str(outcome.error.get("code"))
    ledger.finish(outcome.custom_id, state, error, outcome.input_tokens, outcome.output_tokens, source["kind"])
    return True
