"""A batch's requests answered a line at a time as its schedule reaches them, in bounded memory.

The requests stay in a file of the store, one JSON object per line. Each look at the batch (a poll, or the emulator's
worker between polls) answers the requests its clock says are done since the last look, for at most `look_seconds`,
appending result lines to spool files (one per result file the API has: OpenAI's output and error files,
Anthropic's results). A batch ends only once all it reached is answered; then the requests never reached get their
leftover line (where the API writes one), and each spool is rewritten in shuffled order (the services promise no
order) from its lines' offsets. What a batch holds in memory is its position and tallies, at any size; a restart
with a state folder cuts the spools back to the sizes last saved, so a line is never answered twice.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any, BinaryIO

from nspec.runners.emulator.state import Store, StoredFile

# (spool name, result line, tallies to add): what answering one request gives.
Answered = tuple[str, dict[str, Any], dict[str, int]]


def start(store: Store, input_file_id: str, spools: tuple[str, ...], total: int, owned: bool = False) -> dict[str, Any]:
    """A batch's work over the requests in ``input_file_id`` (``owned``: the batch's own copy, removed when it ends):
    nothing answered yet."""
    return {
        "input": input_file_id,
        "owned": owned,
        "total": total,
        "offset": 0,  # where the next request's line starts in the input
        "answered": 0,
        "spools": {name: {"path": store.scratch_path().name, "size": 0} for name in spools},
        "tally": {},
    }


def requests(store: Store, file_id: str, offset: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
    """The request objects of a stored file from byte ``offset`` on, each with the offset after its line; blank
    lines skipped."""
    with open(store.path(file_id), "rb") as fh:
        fh.seek(offset)
        for line in fh:
            offset += len(line)
            if line.strip():
                yield offset, json.loads(line)


def advance(
    store: Store,
    work: dict[str, Any],
    upto: int,
    answer: Callable[[int, dict[str, Any]], Answered],
    budget: float | None,
) -> bool:
    """Answer the requests before index ``upto`` not answered yet, for at most ``budget`` seconds (None: all);
    `work["answered"]` says how far it got. False when there was nothing to answer."""
    if work["answered"] >= upto:
        return False
    deadline = None if budget is None else time.monotonic() + budget
    with ExitStack() as stack:
        handles = {}
        for name, spool in work["spools"].items():
            path = store.files_dir / spool["path"]
            path.touch()
            os.truncate(path, spool["size"])  # lines written after the last save belong to no answer
            handles[name] = stack.enter_context(open(path, "ab"))
            stack.callback(_record_size, spool, handles[name])
        tally = work["tally"]
        for offset, request in requests(store, work["input"], work["offset"]):
            name, line, counts = answer(work["answered"], request)
            handles[name].write(json.dumps(line).encode() + b"\n")
            for key, n in counts.items():
                tally[key] = tally.get(key, 0) + n
            work["offset"], work["answered"] = offset, work["answered"] + 1
            if work["answered"] >= upto or (deadline is not None and time.monotonic() > deadline):
                break
    return True


def _record_size(spool: dict[str, Any], fh: BinaryIO) -> None:
    fh.flush()
    spool["size"] = fh.tell()


def finish(
    store: Store,
    work: dict[str, Any],
    leftover: Callable[[int, dict[str, Any]], Answered] | None,
    seed: str | None,
    names: dict[str, tuple[str, str, str]],
    created_at: int,
) -> dict[str, StoredFile]:
    """Give every request not answered its ``leftover`` line (None: the API writes none for them), then keep each
    spool that has lines as a stored file, shuffled by ``seed`` (None: in input order, as Gemini writes them):
    ``names`` maps a spool to (filename, purpose, id prefix)."""
    if leftover is not None:
        advance(store, work, work["total"], leftover, budget=None)  # a line each, no answer: quick
    if work["owned"]:
        store.path(work["input"]).unlink(missing_ok=True)
    shuffle = random.Random(seed)
    kept = {}
    for name, spool in work["spools"].items():
        path = store.files_dir / spool["path"]
        filename, purpose, prefix = names[name]
        if spool["size"] == 0:
            path.unlink(missing_ok=True)
            continue
        os.truncate(path, spool["size"])  # lines written after the last save belong to no answer
        if seed is None:
            kept[name] = store.adopt(path, filename, purpose, created_at, prefix)
            continue
        offsets = []
        with open(path, "rb") as fh:
            position = 0
            for line in fh:
                offsets.append(position)
                position += len(line)
            shuffle.shuffle(offsets)
            out_path = store.scratch_path()
            with open(out_path, "wb") as out:
                for position in offsets:
                    fh.seek(position)
                    out.write(fh.readline())
        path.unlink()
        kept[name] = store.adopt(out_path, filename, purpose, created_at, prefix)
    return kept
