"""Local engine benchmark: a spec's requests (the quickstart by default) on the embedded model, with and without
prefix reuse, and on llama.cpp's server set as the engine was before reuse (llama.cpp's own figure).

The spec is compiled once, here; each setting then answers its requests in a fresh process of its own, one engine
loaded there, the settings interleaved and repeated (other work on the machine moves the figures; the ratios of
neighbouring runs move less):
- `reuse`: the engine as a run uses it (`Engine.complete`), the requests in prefix order (`local.prefix_key`),
  each reading from the KV cache the whole micro-batches it shares with the one before;
- `whole`: the same engine and order, every prompt read whole (`Engine(reuse=False)`);
- `before`: an `xllamacpp` server with the settings of the engine before prefix reuse (llama.cpp's defaults but for
  one slot, 512-token batches and the engine's threads: the sliding-window cache a window's, checkpoints on), the
  same prompts read whole, llama.cpp timing them.
Reported per run: the wall time of the requests, prompt tokens, tokens evaluated (not read from the cache), prompt
tokens evaluated per second of wall time (generation included) and, for `before`, per second of llama.cpp's own
prompt timing; the process's peak RSS (the engine and Python); then which answers (greedy, with the
log-probabilities of their tokens) differ between the settings.

Run: .venv/bin/python bench/local.py [--repeat 2] [--settings reuse whole before] [--spec specs/ruler/local.yaml]
(needs the `local` extra)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def compiled(spec: str, into: Path) -> dict[str, Any]:
    """The spec's request lines, in prefix order, and its cells' prompt tokens and answers, written to ``into``."""
    from nspec.compiler.run_writer import compile_run
    from nspec.runners.providers.local import prefix_key
    from nspec.spec import load_spec

    loaded = load_spec(spec)
    with tempfile.TemporaryDirectory() as out:
        run = compile_run(loaded.data, loaded.base_dir, out, {}).path
        cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
        lines = [json.loads(line) for shard in (run / "answers" / "requests").iterdir() for line in shard.open()]
    work = {
        "lines": sorted(lines, key=prefix_key),
        "prompt": sum(c["context_length"]["prompt"] for c in cells),
        "expected": {c["cell_id"]: (c["expected"] or [None])[0] for c in cells if not c["negative"]},
    }
    into.write_text(json.dumps(work))
    return work


def before_answers(lines: list[dict]) -> tuple[dict[str, Any], float]:
    """The answers of llama.cpp's server set as the engine before prefix reuse, and its prompt seconds."""
    import xllamacpp

    from nspec.runners.providers import local

    params = xllamacpp.CommonParams()
    params.model.path = str(local.model_file(local.EMBEDDED_MODEL))
    params.n_ctx = 0
    params.n_parallel = 1
    params.kv_unified = True
    params.n_batch = 512
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = THREADS
    params.verbosity = -1
    server = xllamacpp.Server(params)
    answers, seconds = {}, 0.0
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
        answer = got[-1]["choices"][0]
        seconds += got[-1]["timings"]["prompt_ms"] / 1000
        answers[line["custom_id"]] = {
            "text": answer["text"],
            "logprobs": [t["logprob"] for t in answer["logprobs"]["content"]],
        }
    return answers, seconds


def measure(setting: str, work: dict[str, Any]) -> dict:
    """In this process: answer the requests with ``setting``; the figures, printed and returned."""
    from nspec.runners.providers import local

    lines, prompt = work["lines"], work["prompt"]
    started = time.perf_counter()
    cpu_before = 0.0  # `before` counts its model's load: llama.cpp loads it with the server
    if setting == "before":
        answers, prompt_seconds = before_answers(lines)
        evaluated = prompt
    else:
        model = local.Engine(local.model_file(local.EMBEDDED_MODEL), reuse=setting == "reuse")
        started = time.perf_counter()  # the load not counted, as for `before`'s prompt timing
        cpu_before = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        answers = {}
        for line in lines:
            body = {**line["body"], "logprobs": True}
            choice = model.complete(body, line["custom_id"])["choices"][0]
            logprobs = [t["logprob"] for t in choice["logprobs"]["content"]]
            answers[line["custom_id"]] = {"text": choice["message"]["content"], "logprobs": logprobs}
        evaluated, prompt_seconds = prompt - model.reused_tokens, None
    wall = time.perf_counter() - started
    found = sum(answer in answers[cid]["text"] for cid, answer in work["expected"].items())
    own = f", {evaluated / prompt_seconds:4.0f} by llama.cpp's prompt timing" if prompt_seconds else ""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rss, cpu = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime - cpu_before
    print(
        f"{setting:>6}: {len(lines)} requests in {wall:5.1f} s ({cpu:5.1f} CPU s: other work on the machine moves it "
        f"less); {prompt} prompt tokens, {evaluated} evaluated "
        f"({1 - evaluated / prompt:.0%} from the cache), {evaluated / wall:4.0f} evaluated tok/s of wall{own}; "
        f"peak RSS {rss:,.0f} MB; needles found {found}/{len(work['expected'])}; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return {"setting": setting, "wall": wall, "evaluated": evaluated, "answers": answers}


def differences(first: dict, second: dict) -> list[str]:
    """The requests whose answers differ between two runs: text, or any log-probability."""
    return [cid for cid, answer in first["answers"].items() if answer != second["answers"][cid]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--spec", default=str(ROOT / "specs" / "quickstart.yaml"))
    choices = ("reuse", "whole", "before")
    parser.add_argument("--settings", nargs="+", choices=choices, default=list(choices))
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # a child process: a setting and the work's file
    args = parser.parse_args()
    if args.one is not None:
        setting, path = args.one
        print(json.dumps(measure(setting, json.loads(Path(path).read_text()))))
        return
    print(f"cores: {THREADS}; {args.spec}")
    runs: dict[str, list[dict]] = {s: [] for s in args.settings}
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder) / "work.json"
        compiled(args.spec, work)
        for _ in range(args.repeat):
            for setting in args.settings:
                child = subprocess.run(
                    [sys.executable, __file__, "--one", setting, str(work)], check=True, capture_output=True, text=True
                )
                *said, last = child.stdout.splitlines()
                print(*said, sep="\n", flush=True)
                runs[setting].append(json.loads(last))
    first = {setting: done[0] for setting, done in runs.items()}
    for a, b in [("reuse", "whole"), ("reuse", "before"), ("whole", "before")]:
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
