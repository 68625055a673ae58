"""Local engine benchmark: the quickstart's requests on the embedded model.

Reported: model load time; llama.cpp's tokenising speed; per request, prompt tokens, seconds on the engine and
prompt tokens per second (with several slots, requests share the cores); the needles found; and the total wall time
of the quickstart's requests with 1 and 2 parallel slots (the `concurrency` a local model's `rate_limits` sets), each
in a fresh process.

Run: .venv/bin/python bench/local.py [--slots 1 2]   (needs the `local` extra)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(slots: int) -> None:
    """In this process: compile the quickstart and answer its requests with ``slots`` parallel slots."""
    from nspec.compiler.run_writer import compile_run
    from nspec.runners.providers import local
    from nspec.runners.providers.openai import parse_result as parse_openai
    from nspec.spec import load_spec

    started = time.perf_counter()
    engine = local.engine("gemma-3-270m", slots)
    print(f"slots {slots}: model load {time.perf_counter() - started:.2f} s")
    if slots == 1:
        text = gzip.decompress(resources.files("nspec.compiler").joinpath("corpora/austen/emma.txt.gz").read_bytes())
        sample = text[:200_000].decode("utf-8", "ignore")
        started = time.perf_counter()
        tokens = len(engine.tokenize(sample))
        elapsed = time.perf_counter() - started
        print(f"tokenise: {len(sample.encode()) / 1000 / elapsed:.0f} KB/s ({tokens} tokens in {elapsed:.2f} s)")
    loaded = load_spec(str(ROOT / "specs" / "quickstart.yaml"))
    with tempfile.TemporaryDirectory() as out:
        run = compile_run(loaded.data, loaded.base_dir, out, {}).path
        cells = {c["cell_id"]: c for c in map(json.loads, (run / "cells.jsonl").read_text().splitlines())}
        (shard,) = (run / "answers" / "requests").iterdir()
        lines = [json.loads(line) for line in shard.read_text().splitlines()]
    found = 0

    def one(line: dict) -> tuple[dict, float]:
        began = time.perf_counter()
        answer = engine.output_line(line)
        return answer, time.perf_counter() - began

    started = time.perf_counter()
    with ThreadPoolExecutor(slots) as pool:
        for answer, seconds in pool.map(one, lines):
            outcome = parse_openai(answer)
            cell = cells[outcome.custom_id]
            hit = bool(cell["expected"]) and cell["expected"][0] in (outcome.text or "")
            found += hit
            label = "negative" if cell["negative"] else f"depth {cell['depth']['requested']:g}"
            print(
                f"  {cell['context_length']['target']:>5} {label:<10} {outcome.input_tokens:>5} tokens "
                f"{seconds:5.1f} s {outcome.input_tokens / seconds:5.0f} tok/s  {outcome.text!r}"
            )
    needles = sum(not c["negative"] for c in cells.values())
    print(
        f"slots {slots}: {len(lines)} requests in {time.perf_counter() - started:.1f} s; "
        f"needles found {found}/{needles}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child process measuring one setting
    args = parser.parse_args()
    if args.one is not None:
        measure(args.one)
        return
    print(f"cores: {os.cpu_count()}")
    for slots in args.slots:
        subprocess.run([sys.executable, __file__, "--one", str(slots)], check=True)


if __name__ == "__main__":
    main()
