"""Local engine benchmark: the quickstart's requests on the embedded model, with and without prefix reuse, and on a
bare llama.cpp server (llama.cpp's own figure for the same model file and threads).

Each setting runs in a fresh process, the settings interleaved and repeated (other work on the machine moves the
figures; the ratios of neighbouring runs move less):
- `reuse`: the engine as a run uses it (`Engine.complete`), the requests in prefix order (`local.in_prefix_order`),
  each reading from the KV cache the whole micro-batches it shares with the one before;
- `whole`: the same engine and order, every prompt read whole (`Engine(reuse=False)`);
- `bare`: llama.cpp's own figure: an `xllamacpp` server with its defaults but for the model, its trained context and
  the engine's threads, the same prompts read whole, one after another (what the engine did before prefix reuse).
Reported per run: the wall time of the requests, prompt tokens, tokens evaluated (not read from the cache), prompt
tokens evaluated per second of wall time (ours, generation included) and, for `bare`, per second of llama.cpp's own
prompt timing; then which answers (greedy, with their log-probabilities) differ between the settings.

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


def bare_answers(path: Path, lines: list[dict]) -> tuple[dict[str, Any], int, float]:
    """llama.cpp's answers, read whole on a server with its defaults: answers, tokens evaluated, prompt seconds."""
    import xllamacpp

    from nspec.runners.providers import local

    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_ctx = 0
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.verbosity = -1
    server = xllamacpp.Server(params)
    answers, evaluated, seconds = {}, 0, 0.0
    for line in lines:
        body = line["body"]
        request = {
            "prompt": local.completion_prompt(body["messages"]),
            "temperature": 0,
            "n_predict": body["max_tokens"],
            "n_probs": 1,
            "cache_prompt": False,
        }
        got: list[dict] = []
        server.handle_completions(request, got.append)  # returns None: not stopped
        answer, timings = got[-1]["choices"][0], got[-1]["timings"]
        evaluated += timings["prompt_n"]
        seconds += timings["prompt_ms"] / 1000
        logprobs = [t["logprob"] for t in answer["logprobs"]["content"]]
        answers[line["custom_id"]] = {"text": answer["text"], "logprobs": logprobs}
    return answers, evaluated, seconds


def measure(setting: str) -> dict:
    """In this process: answer the quickstart's requests with ``setting``; the figures, printed and returned."""
    from nspec.runners.providers import local

    lines, cells = quickstart_lines()  # the compile loads the engine (its tokenizer): the runs share that load
    model = local.engine(local.EMBEDDED_MODEL)
    model.reuse = setting == "reuse"
    prompt = sum(c["context_length"]["prompt"] for c in cells.values())
    started = time.perf_counter()
    if setting == "bare":
        answers, evaluated, prompt_seconds = bare_answers(model.path, lines)
    else:
        answers = {}
        for line in lines:
            choice = model.complete({**line["body"], "logprobs": True}, line["custom_id"])["choices"][0]
            logprobs = [t["logprob"] for t in choice["logprobs"]["content"]]
            answers[line["custom_id"]] = {"text": choice["message"]["content"], "logprobs": logprobs}
        evaluated, prompt_seconds = prompt - model.reused_tokens, None
    wall = time.perf_counter() - started
    found = sum(bool(c["expected"]) and c["expected"][0] in answers[cid]["text"] for cid, c in cells.items())
    own = f", {evaluated / prompt_seconds:4.0f} by llama.cpp's prompt timing" if prompt_seconds else ""
    print(
        f"{setting:>5}: {len(lines)} requests in {wall:5.1f} s; {prompt} prompt tokens, {evaluated} evaluated, "
        f"{evaluated / wall:4.0f} evaluated tok/s of wall{own}; "
        f"needles found {found}/{sum(not c['negative'] for c in cells.values())}; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return {"setting": setting, "wall": wall, "evaluated": evaluated, "answers": answers}


def differences(first: dict, second: dict) -> list[str]:
    """The requests whose answers differ between two runs: text, or any log-probability."""
    return [cid for cid, answer in first["answers"].items() if answer != second["answers"][cid]]


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
    first = {setting: done[0] for setting, done in runs.items()}
    for a, b in [("reuse", "whole"), ("reuse", "bare"), ("whole", "bare")]:
        if a in first and b in first:
            differ = differences(first[a], first[b])
            print(f"answers {a} against {b}: {len(differ)} of {len(first[a]['answers'])} differ")
            for cid in differ:
                print(f"  {cid}: {first[a]['answers'][cid]['text']!r} / {first[b]['answers'][cid]['text']!r}")
    if runs.get("reuse") and runs.get("whole"):
        ratios = [r["wall"] / w["wall"] for r, w in zip(runs["reuse"], runs["whole"], strict=True)]
        print(f"reuse/whole wall time, run by run: {', '.join(f'{x:.2f}' for x in ratios)}")


if __name__ == "__main__":
    main()
