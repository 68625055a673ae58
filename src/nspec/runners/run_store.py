"""A compiled run directory as the runners see it: manifest, resolved spec, cells, shards and results files."""

from __future__ import annotations

import bisect
import copy
import fcntl
import functools
import hashlib
import json
import os
import re
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, NamedTuple

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from nspec import jsonl
from nspec.compiler.prices import Lane, price_for
from nspec.compiler.prices import Usage as TokenUsage
from nspec.compiler.providers.contract import model_name, request_id
from nspec.compiler.providers.credentials import credentials
from nspec.compiler.providers.io import Credentials, Outcome
from nspec.errors import RunBusy, UserError, writing
from nspec.records import CellRecord, Manifest, ResultRecord, ScoreRecord, Shard, Usage
from nspec.run_layout import RunPaths
from nspec.runners.failpoints import failpoint
from nspec.runners.ledger import Ledger
from nspec.runners.rehearsal import emulator_of, rehearsed
from nspec.secrets import redact


@dataclass(frozen=True)
class RunModel:
    label: str
    provider: str
    mode: str  # batch | live
    entry: dict[str, Any]  # the model's entry of the resolved spec
    shards: list[Shard]  # from the manifest

    def credentials(self) -> Credentials:
        """The key and address its requests go with, its provider's (a rehearsal's local model is asked through
        OpenAI's API: `runners.rehearsal`)."""
        return credentials({**self.entry, "id": f"{self.provider}/{model_name(self.entry)}"})


# What one result cost (None: unknown) from its model, how it was obtained (`source.kind`) and its usage, as
# `Run.costing` prices it.
Costing = Callable[[str, str, "TokenUsage"], "float | None"]


class Run:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.paths = run_paths(self.path)
        self.manifest: Manifest = _record(self.paths.manifest, json.loads, ("run_id", "models"))
        self.spec: dict[str, Any] = _record(self.paths.spec, _yaml, ("models",))
        override = self.paths.scoring_override
        if override.is_file():  # `nspec rescore` changed how this run is graded
            self.spec["scoring"] = _yaml(override.read_text("utf-8"))
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
        models = [
            RunModel(m["label"], m["id"].split("/", 1)[0], m["mode"], entries[m["label"]], m["shards"]) for m in listed
        ]
        emulator = emulator_of(self.path)  # a rehearsal: every model goes to the emulator
        return models if emulator is None else [rehearsed(m, emulator) for m in models]

    def ledger(self) -> Ledger:
        return Ledger(self.paths.ledger)

    def costing(self, stage: str = "answers") -> Costing:
        """What a stage's result cost, priced request by request at its model's price and lane (a batch result at
        the batch price, a flex model's live result at the flex price); None where the price is unknown."""
        prices = {m.label: (price_for(m.entry["id"], m.entry.get("price")), m.mode) for m in self.models(stage)}

        def cost(model: str, kind: str, usage: TokenUsage) -> float | None:
            price, mode = prices.get(model, (None, "live"))
            if price is None:
                return None
            lane: Lane = "batch" if kind == "batch" else "flex" if mode == "flex" else "live"
            return price.cost(usage, lane)

        return cost

    def cells(self) -> Iterator[CellRecord]:
        """The cells, a line at a time."""
        return jsonl.read(self.paths.cells)  # type: ignore[return-value]

    def results(self, stage: str = "answers") -> Iterator[ResultRecord]:
        """A stage's final results so far, a line at a time, each checked (`checked_result`)."""
        path = self.paths.results(stage)
        return (checked_result(record, path) for record in jsonl.read(path))

    def scores(self) -> Iterator[ScoreRecord]:
        """The scores so far, a line at a time."""
        return jsonl.read(self.paths.scores)  # type: ignore[return-value]

    def require(self, what: str) -> None:
        """Refuse, naming the command that makes it, when the run lacks what a command needs: `answers` (some
        results to score) or `scores` (a graded run to report on or audit)."""
        if what == "answers" and next(self.results(), None) is None:
            raise UserError(
                f"{self.path} has no answers yet: `nspec submit {self.path}` sends its requests and `nspec collect "
                f"{self.path}` fetches the answers (`nspec run SPEC` does both)"
            )
        if what == "scores" and not self.paths.scores.is_file():
            raise UserError(
                f"{self.path} has no scores yet: `nspec score {self.path}` grades its answers (once they are in)"
            )

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
        why = "no manifest.json" if root.is_dir() else "no such folder"
        raise UserError(f"{root} is not a run directory ({why}); compile a spec first: nspec compile SPEC prints one")
    return paths


def _yaml(text: str) -> Any:
    """A run's YAML record, parsed: a copy of the parse of the same text (one command opens its run many times)."""
    return copy.deepcopy(_parsed_yaml(text))


@functools.lru_cache(maxsize=8)
def _parsed_yaml(text: str) -> Any:
    return YAML(typ="safe", pure=True).load(text)


def _record(path: Path, parse: Callable[[str], Any], keys: tuple[str, ...]) -> Any:
    """A record compile wrote (the manifest, the resolved spec), parsed; a damaged one is bad input, named."""
    try:
        data = parse(path.read_text("utf-8"))
    except FileNotFoundError:
        data, why = None, "is missing"
    except (ValueError, YAMLError) as exc:  # JSON and UTF-8 errors are ValueErrors
        data, why = None, f"cannot be read ({str(exc).splitlines()[0][:200]})"
    else:
        missing = [key for key in keys if not isinstance(data, dict) or key not in data]
        if not missing:
            return data
        why = f"lacks {', '.join(missing)}"
    raise UserError(
        f"{path} {why}: the run directory is damaged; restore it from a copy, or compile the spec again into a new "
        "folder (-o)"
    )


_held: set[Path] = set()  # run directories this process works in now


@contextmanager
def exclusive(root: Path, wait: bool = False, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Work in the run directory ``root`` as the only process doing so: two processes submitting or collecting at
    once would each send what the other is sending. The lock is the kernel's (flock), so a killed holder leaves
    none behind; nested calls in one process (`run` → `submit`) share it. Held by another process: `RunBusy`
    naming it, or with ``wait``, wait for it (``on_wait`` hears who holds it first)."""
    key = root.resolve()
    if key in _held:
        yield
        return
    paths = run_paths(root)
    with open(paths.lock, "a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fh)
            if not wait:
                raise RunBusy(
                    f"{root} is being worked on by {holder}; run again later (or pass --wait-lock to wait)"
                ) from None
            if on_wait is not None:
                on_wait(holder)
            fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        fh.truncate()
        since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        fh.write(f"{os.getpid()} {since}\n")
        fh.flush()
        _held.add(key)
        try:
            yield
        finally:
            _held.discard(key)
            fcntl.flock(fh, fcntl.LOCK_UN)


def _holder(fh: IO[str]) -> str:
    fh.seek(0)
    pid, _, since = fh.read().strip().partition(" ")
    return f"pid {pid or 'unknown'}" + (f" since {since}" if since else "")


def shard_lines(path: Path) -> Iterator[tuple[str, bytes]]:
    """(custom_id, raw line) of a request shard, streamed."""
    for _, cid, _, line in _shard_requests(path):
        yield cid, line


class LineAt(NamedTuple):
    """Where a shard's line starts, and a digest of it: the line read there again must be the same."""

    offset: int
    digest: bytes


def _digest(line: bytes) -> bytes:
    return hashlib.blake2b(line, digest_size=16).digest()


def located_shard_requests(path: Path) -> Iterator[tuple[LineAt, str, dict[str, Any]]]:
    """(where its line is, custom_id, request) of a request shard, streamed: `shard_request_at` reads one again."""
    for offset, cid, request, line in _shard_requests(path):
        yield LineAt(offset, _digest(line)), cid, request


def _shard_requests(path: Path) -> Iterator[tuple[int, str, dict[str, Any], bytes]]:
    """(byte offset, custom_id, request, raw line) of a request shard; a line with no id is the file's damage."""
    for offset, request, line in jsonl.read_raw(path):
        try:
            cid = request_id(request)
        except (KeyError, AttributeError):
            damaged = f"{path}: byte {offset} starts no request line (no custom_id); the file is damaged"
            raise UserError(damaged) from None
        yield offset, cid, request, line


def shard_request_at(path: Path, at: LineAt, custom_id: str) -> dict[str, Any]:
    """The request of ``custom_id`` in a shard, whose line is ``at``; refused when that line is no longer the one
    read there (the shard changed since)."""
    with open(path, "rb") as fh:
        fh.seek(at.offset)
        line = fh.readline()
    if _digest(line) != at.digest:
        raise UserError(
            f"{path}: changed while its requests were sent (byte {at.offset} no longer starts {custom_id}'s line as "
            "it was read)"
        )
    return dict(json.loads(line))


def register_shards(run: Run, ledger: Ledger, stage: str, models: list[RunModel], state: str = "planned") -> None:
    """Record the compiled shards of ``models`` in the ledger as jobs with their requests (once)."""
    known = {j.shard for j in ledger.jobs(stage)}
    new = [(model, shard) for model in models for shard in model.shards if shard["file"] not in known]
    if not new:
        return
    by_shard: dict[str, list[str]] = {}
    if stage == "answers":  # cells.jsonl names each cell's shard: no need to read the (far larger) shards
        for cell in run.cells():
            by_shard.setdefault(cell["shard"], []).append(cell["cell_id"])
    for model, shard in new:
        ids = by_shard.get(shard["file"]) or [cid for cid, _ in shard_lines(run.path / shard["file"])]
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
            self.ids = set(cell_ids(path))
        self._fh: IO[bytes] = open(path, "ab")  # noqa: SIM115 - closed in close()

    def _repair(self) -> None:
        """Cut a last line left without its newline; only the file's tail is read."""
        with open(self.path, "rb+") as fh:
            size = fh.seek(0, os.SEEK_END)
            end = size
            while end > 0:
                start = max(0, end - (1 << 16))
                fh.seek(start)
                newline = fh.read(end - start).rfind(b"\n")
                if newline >= 0:
                    end = start + newline + 1
                    break
                end = start
            if end != size:
                fh.truncate(end)

    def records(self, wanted: set[str]) -> Iterator[ResultRecord]:
        """The records of the cells in ``wanted``, streamed from the file."""
        self._fh.flush()
        for record in jsonl.read(self.path):
            if record["cell_id"] in wanted:
                yield record  # type: ignore[misc]

    def append(self, record: ResultRecord) -> bool:
        """Write ``record`` unless its cell already has a result; True if written."""
        if record["cell_id"] in self.ids:
            return False
        with writing(self.path):
            self._fh.write(jsonl.encode(record))
            self._fh.flush()  # in the kernel's hands: survives the process being killed
        self.ids.add(record["cell_id"])
        return True

    def close(self) -> None:
        try:
            with writing(self.path):
                self._fh.flush()
                os.fsync(self._fh.fileno())
        finally:
            self._fh.close()


_CELL_ID = re.compile(rb'^\{"cell_id":"([^"\\]*)"')


def cell_ids(path: Path) -> Iterator[str]:
    """The cell ids of a results file (see `_line_cell_id`); a line that is no result is refused, naming it. Nothing
    when the file does not exist."""
    if not path.is_file():
        return
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            cell_id = _line_cell_id(line)
            if cell_id is None:
                raise UserError(f"{path}:{number}: not a result line (a JSON object with a cell_id)")
            yield cell_id.decode()


def checked_result(record: Any, path: Path) -> ResultRecord:
    """A line of a results file, if its fields have their types; else a `UserError` naming the cell and the repair (a
    hand edit or a bad sync must not crash scoring or the report)."""
    problem = _result_problem(record)
    if problem is None:
        return record  # type: ignore[no-any-return]
    cell = record.get("cell_id") if isinstance(record, dict) else None
    raise UserError(
        f"{path}: the result of cell {cell!r} is damaged ({problem}): restore the file, or delete that line and run "
        f"`nspec collect {path.parent.parent}`, which fetches it again"
    )


def _result_problem(record: Any) -> str | None:
    if not isinstance(record, dict) or not isinstance(record.get("cell_id"), str):
        return "no cell_id"
    if record.get("status") not in ("ok", "error", "expired", "cancelled"):
        return f"status {record.get('status')!r:.40}"
    for name in ("text", "finish_reason"):
        if record.get(name) is not None and not isinstance(record[name], str):
            return f"{name} is a {type(record[name]).__name__}"
    usage = record.get("usage")
    if not isinstance(usage, dict) or not all(isinstance(v, int) and v >= 0 for v in usage.values()):
        return f"usage {usage!r:.80}"
    for name in ("error", "source"):
        if record.get(name) is not None and not isinstance(record[name], dict):
            return f"{name} is a {type(record[name]).__name__}"
    return None


class LineIndex:
    """A JSONL file of records keyed by `cell_id` (a results or scores file), opened for lookups: a record is read
    and parsed only when asked for. Memory is 16 bytes a line, not a dict of ids: each line is kept as a 32-bit hash
    of its id beside its line number, sorted, and its byte offset; a lookup reads the lines whose hash matches and
    checks the id (the last line with the id wins). A line still being written (no newline yet) is left out. Each
    record read is checked by ``check`` (`checked_result` for a results file)."""

    def __init__(self, path: Path, check: Callable[[Any, Path], Any] | None = None) -> None:
        self.path = path
        self.check = check
        keys, self._offsets = array("Q"), array("Q")
        self._fh: IO[bytes] | None = None
        if path.is_file():
            self._fh = open(path, "rb")  # noqa: SIM115 - closed in close()
            offset = 0
            for line in self._fh:
                cell_id = _line_cell_id(line) if line.endswith(b"\n") else None
                if cell_id is not None:
                    keys.append(zlib.crc32(cell_id) << 32 | len(self._offsets))
                    self._offsets.append(offset)
                offset += len(line)
        self._keys = array("Q", sorted(keys))

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, cell_id: str) -> Any:
        """The record of ``cell_id``, parsed; None when the file has none."""
        if self._fh is None:
            return None
        wanted = cell_id.encode()
        digest = zlib.crc32(wanted)
        found = None
        at = bisect.bisect_left(self._keys, digest << 32)
        while at < len(self._keys) and self._keys[at] >> 32 == digest:
            self._fh.seek(self._offsets[self._keys[at] & 0xFFFFFFFF])
            line = self._fh.readline()
            if _line_cell_id(line) == wanted:
                found = line
            at += 1
        if found is None:
            return None
        record = json.loads(found)
        return record if self.check is None else self.check(record, self.path)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()

    def __enter__(self) -> LineIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _line_cell_id(line: bytes) -> bytes | None:
    """The cell id of a record's line: read from its start where `jsonl.encode` put it, else from the parsed line;
    None for a line that is no record."""
    match = _CELL_ID.match(line)
    if match is not None:
        return match.group(1)
    try:
        record = json.loads(line)
    except ValueError:
        return None
    cell_id = record.get("cell_id") if isinstance(record, dict) else None
    return cell_id.encode() if isinstance(cell_id, str) else None


def record_outcome(
    results: ResultsFile,
    ledger: Ledger,
    stage: str,
    model: str,
    outcome: Outcome,
    source: dict[str, Any],
    costing: Costing,
) -> bool:
    """A request's final outcome: its line in the stage's results file, then its state and cost in the ledger (in
    that order, so a crash between the two is repaired from the file on the next start). ``source["kind"]`` says
    how it was obtained. False, with nothing written, when the cell has a result already."""
    record = result_record(stage, model, outcome, source)
    if not results.append(record):
        return False
    failpoint("after-append")
    _record_final(ledger, record, costing)
    return True


def result_record(stage: str, model: str, outcome: Outcome, source: dict[str, Any]) -> ResultRecord:
    """The results file's line of a final outcome."""
    usage: Usage = {"input_tokens": outcome.input_tokens, "output_tokens": outcome.output_tokens}
    error = outcome.error
    if error is not None:  # a provider's words, which a gateway may have filled with the key it received
        error = {k: redact(v) if isinstance(v, str) else v for k, v in error.items()}
        error.setdefault("retryable", outcome.retryable)
    for name in ("cache_read_tokens", "cache_write_tokens", "cache_write_1h_tokens"):
        if getattr(outcome, name):
            usage[name] = getattr(outcome, name)
    record: ResultRecord = {
        "cell_id": outcome.custom_id,
        "stage": stage,
        "model": model,
        "status": outcome.status,
        "text": None if outcome.text is None else redact(outcome.text),  # a gateway may put anything there
        "finish_reason": outcome.finish_reason,
        "usage": usage,
        "error": error,
        "source": source,
    }
    return record


def _record_final(ledger: Ledger, record: ResultRecord, costing: Costing) -> None:
    state = "done" if record["status"] == "ok" else "failed"
    error = None if record["error"] is None else str(record["error"].get("code"))
    usage, kind = TokenUsage.of(dict(record["usage"])), str(record["source"]["kind"])
    ledger.finish(record["cell_id"], state, error, usage, costing(record["model"], kind, usage), kind)


def reconcile(results: ResultsFile, ledger: Ledger, unsettled: Iterable[str], costing: Costing) -> None:
    """Results in the file whose final state the ledger lacks (a crash came between writing one and recording it):
    recorded now as they are — their real outcome, tokens and source — so an error stays an error and its tokens
    are paid for in the totals."""
    found = results.ids.intersection(unsettled)
    if found:
        for record in results.records(found):
            _record_final(ledger, record, costing)


def drop_results(path: Path, cell_ids: set[str], between: Callable[[], None]) -> None:
    """Take the lines of ``cell_ids`` out of the results file ``path``: the rest is copied a line at a time beside it
    and renamed over it. ``between`` runs once the copy is complete and before the rename (the ledger is told
    there: a crash before the rename leaves the lines in place, and the ledger records them again as it finds them)."""
    part = path.with_name(path.name + ".part")
    with writing(part), open(path, "rb") as src, open(part, "wb") as out:
        for line in src:
            cell_id = _line_cell_id(line)
            if cell_id is None or cell_id.decode() not in cell_ids:
                out.write(line)
        out.flush()
        os.fsync(out.fileno())
    between()
    part.replace(path)


class Lost(NamedTuple):
    """A result the ledger records as final that the results file lacks."""

    source: str  # how it came: batch, live, local, ...
    job_id: int | None  # the job it was last sent in
    model: str


def lost_results(ledger: Ledger, stage: str, present: set[str]) -> dict[str, Lost]:
    """The requests of ``stage`` the ledger records as final whose line is not among ``present`` (the results
    file's ids)."""
    return {row[0]: Lost(*row[1:]) for row in ledger.final_requests(stage) if row[0] not in present}


def check_results(run: Run, stage: str = "answers") -> None:
    """Refuse, naming the count and the command that repairs it, a results file that lacks results the ledger
    records as final: scoring or reporting it would shrink the run's figures without a word."""
    if not run.paths.ledger.is_file():
        return
    path = run.paths.results(stage)
    present = set(cell_ids(path))
    ledger = run.ledger()
    try:
        lost = lost_results(ledger, stage, present)
    finally:
        ledger.close()
    if lost:
        raise UserError(
            f"{len(lost)} results the ledger records are missing from {path} (lines lost to a bad sync, a partial "
            f"restore, a deleted file): `nspec collect {run.path}` fetches them again from the provider"
        )
