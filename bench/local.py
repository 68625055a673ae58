"""Local engine benchmark: the quickstart's requests on the embedded model, with and without prefix reuse.

Each setting runs in a fresh process, the settings interleaved and repeated (other work on the machine moves the
figures; the ratios of neighbouring runs move less):
- `reuse`: the engine as a run uses it, the requests in prefix order (`local.in_prefix_order`), each reading the
  prefix it shares with the one before from the KV cache;
- `whole`: the same engine and order, every prompt read whole (`Engine(reuse=False)`);
- `bare`: llama.cpp's own figure: a bare `xllamacpp` server with its default settings and the same threads, the same
  prompts read whole, one after another.
Reported per run: wall time of the requests, prompt tokens, tokens evaluated (not read from the cache), prompt
tokens per second as llama.cpp times them (evaluated tokens over prompt time), and the needles found; at the end,
whether `reuse` and `whole` gave the same answers, and the reuse/whole time ratios.

Run: .venv/bin/python bench/local.py [--repeat 2] [--settings reuse whole bare]   (needs the `local` extra)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def quickstart_lines() -> tuple[list[dict], dict[str, dict]]:
    """The quickstart's compiled request lines, in prefix order, and its cells by id."""
    from nspec.compiler.run_writer import compile_run
    from nspec.runners.providers.local import in_prefix_order
    from nspec.spec import load_spec

    class Line:
        def __init__(self, line: dict) -> None:
            self.line = line

    loaded = load_spec(str(ROOT / "specs" / "quickstart.yaml"))
    with tempfile.TemporaryDirectory() as out:
        run = compile_run(loaded.data, loaded.base_dir, out, {}).path
        cells = {c["cell_id"]: c for c in map(json.loads, (run / "cells.jsonl").read_text().splitlines())}
        (shard,) = (run / "answers" / "requests").iterdir()
        lines = [json.loads(line) for line in shard.read_text().splitlines()]
    return [sent.line for sent in in_prefix_order(map(Line, lines))], cells


def bare_server(path: Path) -> object:
    """llama.cpp's server with its defaults but for the model, its trained context and the engine's threads."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_ctx = 0
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.verbosity = -1
    return xllamacpp.Server(params)


def completion(server: Any, request: dict) -> dict:
    """llama.cpp's answer to a completion request, with its timings."""
    got: list[dict] = []

    def take(data: dict) -> bool:
        got.append(data)
        return False  # not stopped

    server.handle_completions(request, take)
    return got[-1]


def measure(setting: str) -> dict:
    """In this process: answer the quickstart's requests with ``setting``; the figures, printed and returned."""
    from nspec.runners.providers import local

    lines, cells = quickstart_lines()  # the compile loads the engine (its tokenizer): the runs share that load
    server: Any = local.engine(local.EMBEDDED_MODEL)._server
    if setting == "bare":
        server = bare_server(local.model_file(local.EMBEDDED_MODEL))
    answers, prompt, evaluated, prompt_ms = {}, 0, 0, 0.0
    started = time.perf_counter()
    for line in lines:
        request = {"prompt": local.completion_prompt(line["body"]["messages"]), "temperature": 0, "n_predict": 12}
        request["cache_prompt"] = setting == "reuse"  # as `Engine.complete` asks with reuse on or off
        answer = completion(server, request)
        timings = answer["timings"]
        prompt += answer["usage"]["prompt_tokens"]
        evaluated += timings["prompt_n"]
        prompt_ms += timings["prompt_ms"]
        answers[line["custom_id"]] = answer["choices"][0]["text"]
    wall = time.perf_counter() - started
    found = sum(bool(c["expected"]) and c["expected"][0] in answers[cid] for cid, c in cells.items())
    figures = {"setting": setting, "wall": wall, "prompt": prompt, "evaluated": evaluated, "prompt_ms": prompt_ms}
    print(
        f"{setting:>5}: {len(lines)} requests in {wall:5.1f} s; {prompt} prompt tokens, {evaluated} evaluated, "
        f"{evaluated / prompt_ms * 1000:4.0f} tok/s (llama.cpp's timing), {prompt / wall:4.0f} prompt tok/s of wall; "
        f"needles found {found}/{sum(not c['negative'] for c in cells.values())}",
        flush=True,
    )
    return {**figures, "answers": answers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--settings", nargs="+", choices=("reuse", "whole", "bare"), default=["reuse", "whole", "bare"])
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process measuring one setting
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one)))
        return
    print(f"cores: {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}")
    runs: dict[str, list[dict]] = {s: [] for s in args.settings}
    for _ in range(args.repeat):
        for setting in args.settings:
            child = subprocess.run(
                [sys.executable, __file__, "--one", setting], check=True, capture_output=True, text=True
            )
            *said, last = child.stdout.splitlines()
            print(*said, sep="\n", flush=True)
            runs[setting].append(json.loads(last))
    if runs.get("reuse") and runs.get("whole"):
        same = all(r["answers"] == w["answers"] for r in runs["reuse"] for w in runs["whole"])
        ratios = [r["wall"] / w["wall"] for r, w in zip(runs["reuse"], runs["whole"], strict=True)]
        print(f"answers with and without reuse: {'the same' if same else 'DIFFERENT'}")
        for cid, answer in runs["reuse"][0]["answers"].items():
            if answer != runs["whole"][0]["answers"][cid]:
                print(f"  {cid}: {answer!r} with reuse, {runs['whole'][0]['answers'][cid]!r} read whole")
    if runs.get("reuse") and runs.get("bare"):
        same = all(r["answers"] == b["answers"] for r in runs["reuse"] for b in runs["bare"])
        print(f"answers with reuse and llama.cpp's defaults: {'the same' if same else 'DIFFERENT'}")
        print(f"reuse/whole wall time, run by run: {', '.join(f'{x:.2f}' for x in ratios)}")


if __name__ == "__main__":
    main()
