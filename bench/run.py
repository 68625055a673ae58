"""Runner benchmark against the emulator.

Live: N requests to a model limited to R requests/min (bursts of one second allowed, as providers enforce limits
over short windows), each call taking a fixed latency. Reported: achieved throughput as a share of R, and the
429s served — once with the limit configured in the spec, once with the runner learning it from headers and 429s.
Batch: HTTP calls made per batch from submit to collected.

Run: .venv/bin/python bench/run.py [--requests 1000] [--rpm 1200] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nspec.compiler.run_writer import compile_run
from nspec.runners.emulator import Emulator, EmulatorConfig
from nspec.runners.emulator.config import Timing
from nspec.runners.session import Session
from nspec.spec import load_spec

SPEC = """\
nspec: 1
name: bench-{name}
seed: {seed}
haystack: {{noise: true}}
needles:
  - text: "The special magic number is: {{n}}."
    question: "What is the special magic number?"
    answer: "{{n}}"
    vars: {{n: {{digits: 7}}}}
grid: {{context_lengths: [200], depths: {{steps: 20}}, trials: {trials}}}
prompt: {{user: "{{haystack}}\\n{{question}}", reserve_tokens: 20}}
models:
  - {{id: openai/gpt-4.1-mini, mode: {mode}, base_url: "{url}"{limits}}}
run: {{poll: {{min_seconds: 0.2, max_seconds: 1}}}}
"""


def compiled(folder: Path, name: str, url: str, mode: str, requests: int, limits: str = "") -> Path:
    spec = folder / f"{name}.yaml"
    spec.write_text(
        SPEC.format(name=name, seed=len(name), trials=max(1, requests // 20), mode=mode, url=url, limits=limits)
    )
    loaded = load_spec(str(spec))
    return compile_run(loaded.data, loaded.base_dir, folder / "out", {}).path


def live(folder: Path, name: str, rpm: int, latency: float, requests: int, configured: bool) -> dict:
    """The emulator in its own process, as a provider is: the runner's pacing is measured, not the GIL's."""
    config = folder / f"{name}-emulator.yaml"
    config.write_text(
        f"timing: {{live_latency_seconds: {latency}}}\n"
        f"rate_limits: {{requests_per_minute: {rpm}, burst_seconds: 1.0}}\n"
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "nspec", "emulator", "--port", "0", "--config", str(config)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split()[-1]  # "OpenAI base URL: http://127.0.0.1:PORT/v1"
        limits = f", rate_limits: {{requests_per_minute: {rpm}}}" if configured else ""
        run = compiled(folder, name, url, "live", requests, limits)
        session = Session.open(str(run))
        start = time.perf_counter()
        progress = session.submit()
        wall = time.perf_counter() - start
        session.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    n = len((run / "answers" / "results.jsonl").read_text().splitlines())
    return {
        "n": n,
        "wall": wall,
        "share": n / wall / (rpm / 60),
        "429": progress.rate_limited,
        "failed": progress.failed,
    }


def batch(folder: Path, requests: int) -> dict:
    with Emulator(
        EmulatorConfig(timing=Timing(validate_seconds=0.3, seconds_per_request=0.002, finalize_seconds=0.3))
    ) as emu:
        run = compiled(folder, "batch", emu.openai_base_url, "batch", requests)
        session = Session.open(str(run))
        session.submit()
        polls = 0
        while True:
            polls += 1
            if not session.collect().pending:
                break
            time.sleep(0.5)
        session.close()
        calls = sum(emu.emulation.statuses.values())
        return {"calls": calls, "batches": 1, "collect_rounds": polls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rpm", type=int, default=1200)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "bench")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(
            f"live: {args.requests} requests, limit R = {args.rpm}/min ({args.rpm / 60:.0f}/s), "
            f"latency {args.latency}s per call"
        )
        for configured in (True, False):
            r = live(folder, f"live-{configured}", args.rpm, args.latency, args.requests, configured)
            how = "limit configured  " if configured else "learnt from headers"
            print(
                f"  {how}: {r['n']} done in {r['wall']:.1f}s = {r['share']:.1%} of R, {r['429']} x 429, "
                f"{r['failed']} failed"
            )
        b = batch(folder, args.requests)
        print(
            f"batch: {args.requests} requests in one batch: {b['calls']} HTTP calls from submit to collected "
            f"({b['collect_rounds']} collect rounds; upload, create, polls, download)"
        )


if __name__ == "__main__":
    main()
