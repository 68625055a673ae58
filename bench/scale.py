"""Scale benchmark: runs of 1K, 10K and 100K requests end to end against the emulator, in batch and live mode.

Every stage is the `nspec` command a user types (compile, submit, collect --wait, score, report),
each in its own process, so its peak memory (max RSS) is its own; the emulator runs in a process of its own too.
Printed per size and mode: wall time and peak RSS of every stage and of the emulator, batches made and HTTP calls per
batch. Then the ledger's rate of recording final states, in groups and one commit each.

With --whole, the stages are one: `nspec run --wait SPEC` (compile, submit, collect, score and report in one process),
and its peak RSS is the one printed; then `nspec report` builds the report again in a process of its own. Sizes default
to 20,000 and 100,000 requests there, and each mode's peaks at its largest size are printed against those at its
smallest: memory flat in the number of requests is a ratio near 1.

Run: .venv/bin/python bench/scale.py [--sizes 1000,10000,100000] [--modes batch,live] [--whole] [--lengths 1000,...]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = """\
nspec: 1
name: scale-{mode}-{size}
seed: 3
haystack: {{corpus: austen}}
needles:
  - text: "The special magic {{city}} number is: {{n}}."
    question: "What is the special magic {{city}} number?"
    answer: "{{n}}"
    vars: {{city: {{choice: cities}}, n: {{digits: 7}}}}
grid: {{context_lengths: [{lengths}], depths: {{steps: 25}}, trials: {trials}}}
prompt: {{user: "{{haystack}}\\n\\n{{question}}", reserve_tokens: 30}}
models:
  - {{id: openai/gpt-4.1-mini, mode: {mode}, base_url: "{url}"}}
scoring:
  - contains: "{{answer}}"
run: {{poll: {{min_seconds: 0.5, max_seconds: 2}}}}
"""
DEPTHS = 25  # cells per trial and context length
EMULATOR_CONFIG = {
    "timing": {"validate_seconds": 0.5, "seconds_per_request": 0.0001, "finalize_seconds": 0.5},
    "rate_limits": {"requests_per_minute": 600_000, "tokens_per_minute": 10_000_000_000},
}


def serve(config: str) -> None:
    """The emulator, in this process: prints its URL, serves until stdin closes, then prints HTTP calls served and
    its own peak RSS as JSON."""
    from nspec.runners.emulator import Emulator
    from nspec.runners.emulator.config import load_config

    with Emulator(load_config(config)) as emu:
        print(emu.openai_base_url, flush=True)
        sys.stdin.read()
        calls = sum(emu.emulation.statuses.values())
    print(json.dumps({"calls": calls, "rss_mb": peak_rss_mb(os.getpid())}), flush=True)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stage(args: list[str], env: dict[str, str], folder: Path) -> tuple[int, float, float, float, str]:
    """Run one nspec command in its own process: exit code, wall seconds, CPU seconds, its own peak RSS in MB,
    stdout."""
    out_path, err_path = folder / "stage.out", folder / "stage.err"
    start = time.perf_counter()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        process = subprocess.Popen([sys.executable, "-m", "nspec", *args], stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(process.pid, 0)  # this child's own rusage, not the maximum over all children
    wall = time.perf_counter() - start
    process.returncode = code = os.waitstatus_to_exitcode(status)
    if code not in (0, 3):
        sys.exit(f"nspec {' '.join(args)} exited {code}:\n{err_path.read_text()[-2000:]}{_errors(args)}")
    return code, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out_path.read_text()


def _errors(args: list[str]) -> str:
    """What the requests that ended without an answer ended with, when a stage says some did."""
    results = next(Path(args[-1]).glob("**/answers/results.jsonl"), None)
    if results is None:
        return ""
    codes: dict[str, int] = {}
    with open(results) as fh:
        for line in fh:
            record = json.loads(line)
            if record["status"] != "ok":
                error = record.get("error") or {}
                key = f"{error.get('code')}: {str(error.get('message'))[:120]}"
                codes[key] = codes.get(key, 0) + 1
    return "".join(f"\n  {n} x {key}" for key, n in sorted(codes.items(), key=lambda kv: -kv[1]))


def one_run(folder: Path, size: int, mode: str, whole: bool, lengths: list[int]) -> dict:
    config = folder / "emulator.json"
    config.write_text(json.dumps(EMULATOR_CONFIG))
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert server.stdin is not None and server.stdout is not None
    url = server.stdout.readline().strip()
    env = {**os.environ, "OPENAI_API_KEY": "bench"}
    stages: dict[str, tuple[float, float, float]] = {}
    try:
        spec = folder / f"scale-{mode}-{size}.yaml"
        trials = max(1, size // (DEPTHS * len(lengths)))
        spec.write_text(SPEC.format(mode=mode, size=size, lengths=", ".join(map(str, lengths)), trials=trials, url=url))
        if whole:
            _, wall, cpu, rss, _ = stage(["run", "--wait", str(spec), "--out", str(folder / "out")], env, folder)
            stages["run --wait"] = (wall, cpu, rss)
            run = str(next((folder / "out").glob("*/*/manifest.json")).parent)
            _, wall, cpu, rss, _ = stage(["report", run], env, folder)
            stages["report"] = (wall, cpu, rss)
        else:
            _, wall, cpu, rss, out = stage(["compile", str(spec), "--out", str(folder / "out")], env, folder)
            run = out.strip().splitlines()[-1]
            stages["compile"] = (wall, cpu, rss)
            _, wall, cpu, rss, _ = stage(["submit", run], env, folder)
            stages["submit"] = (wall, cpu, rss)
            # The wall time includes waiting for the emulator to answer (polling with the spec's backoff); the CPU
            # time is nspec's own.
            _, wall, cpu, rss, _ = stage(["collect", "--wait", run], env, folder)
            stages["collect"] = (wall, cpu, rss)
            for name in ("score", "report"):
                _, wall, cpu, rss, _ = stage([name, run], env, folder)
                stages[name] = (wall, cpu, rss)
    finally:
        server.stdin.close()
        emulator = json.loads(server.stdout.read().strip().splitlines()[-1])
        server.wait(timeout=30)
    with sqlite3.connect(Path(run) / "ledger.sqlite") as db:
        batches = db.execute("SELECT count(*) FROM jobs").fetchone()[0]
    return {
        "stages": stages,
        "emulator": emulator,
        "batches": batches,
        "run_mb": sum(p.stat().st_size for p in Path(run).rglob("*") if p.is_file()) / 1e6,
    }


def ledger_rate(n: int = 10_000) -> tuple[float, float]:
    """Final states recorded per second by the ledger: in its commit groups, and committed one by one."""
    from nspec.compiler.prices import Usage
    from nspec.runners.ledger import Ledger

    rates = []
    usage = Usage(input_tokens=1000, output_tokens=10)
    for grouped in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            ledger = Ledger(Path(tmp) / "ledger.sqlite")
            ids = [f"r{i}" for i in range(n)]
            ledger.add_job("answers", "m", "p", "s.jsonl", "0", ids, 1)
            start = time.perf_counter()
            for cid in ids:
                ledger.finish(cid, "done", None, usage, 0.001, "batch")
                if not grouped:
                    ledger.flush()
            ledger.flush()
            rates.append(n / (time.perf_counter() - start))
            ledger.close()
    return rates[0], rates[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", help="requests per run (default 1000,10000,100000; with --whole 20000,100000)")
    parser.add_argument("--modes", default="batch,live")
    parser.add_argument("--lengths", default="1000,2000,4000,8000", help="the context lengths, in tokens")
    parser.add_argument("--whole", action="store_true", help="one stage: nspec run --wait")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    names = ("run --wait", "report") if args.whole else ("compile", "submit", "collect", "score", "report")
    sizes = [int(s) for s in (args.sizes or ("20000,100000" if args.whole else "1000,10000,100000")).split(",")]
    peaks: dict[str, dict[int, dict[str, float]]] = {}  # mode → size → stage → peak RSS in MB
    print("per stage: wall seconds / CPU seconds / peak RSS")
    print(f"{'run':>14}  " + "  ".join(f"{n:>21}" for n in names) + f"  {'emulator':>9}  batches  calls/batch")
    for size in sizes:
        for mode in args.modes.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                r = one_run(Path(tmp), size, mode, args.whole, [int(n) for n in args.lengths.split(",")])
            peaks.setdefault(mode, {})[size] = {n: r["stages"][n][2] for n in names}
            cells = "  ".join(f"{w:6.1f}s {c:5.1f}s {m:4.0f}MB" for w, c, m in (r["stages"][n] for n in names))
            per_batch = f"{r['emulator']['calls'] / r['batches']:.1f}" if mode == "batch" else "-"
            print(
                f"{mode:>6} {size:>7}  {cells}  {r['emulator']['rss_mb']:7.0f}MB  {r['batches']:>7}  {per_batch:>11}"
                f"   ({r['run_mb']:.0f} MB run dir)",
                flush=True,
            )
    for mode, by_size in peaks.items():
        small, large = min(by_size), max(by_size)
        if small != large:
            print(f"{mode}: peak RSS at {large:,} requests against {small:,}")
            for n in names:
                before, after = by_size[small][n], by_size[large][n]
                print(f"  {n:>10}: {before:4.0f} -> {after:4.0f} MB ({after / before:.2f}x)")
    grouped, single = ledger_rate()
    print(f"ledger: {grouped:,.0f} final states/s in commit groups, {single:,.0f}/s committed one by one")


if __name__ == "__main__":
    main()
