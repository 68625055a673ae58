"""Compile benchmark: the kamradt-classic grid (15 lengths 1K-128K x 15 sigmoid depths, Paul Graham's essays,
cl100k_base), two models.

Prints, for nspec: wall time of the compile (the spec loaded first, as `nspec compile` loads it, and timed apart),
bytes written, MB/s and peak RSS; the same for just JSON-encoding and writing the same
request lines (the floor any compiler pays); and needlehaystack's own code building the same 225 contexts from its
own essays with the same offline encoding, and how many of them equal nspec's. Each part runs in a fresh process so
peak RSS is its own.

Setup, once, in the project's environment:
    .venv/bin/pip install numpy && .venv/bin/pip install --no-deps needlehaystack==0.1.0
Run:
    .venv/bin/python bench/compile.py            # add --skip-needlehaystack for the nspec figures only
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "specs" / "kamradt-classic.yaml"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def part_nspec(out: Path) -> dict:
    from nspec.compiler.run_writer import compile_run
    from nspec.spec import load_spec

    start = time.perf_counter()
    loaded = load_spec(str(SPEC), compiles_next=True)  # as `nspec compile` loads it: its compile checks the rest
    loaded_at = time.perf_counter()
    result = compile_run(loaded.data, loaded.base_dir, out, {"file": str(SPEC)})
    wall = time.perf_counter() - loaded_at
    return {
        "wall_s": wall,
        "load_s": loaded_at - start,
        "bytes": folder_bytes(result.path),
        "run": str(result.path),
        "rss_mb": peak_rss_mb(),
    }


def part_json_floor(run: Path) -> dict:
    """JSON-encode and write the same request lines and cell records: the least any compiler must do, with the
    standard library's encoder and with orjson (the one nspec writes with)."""
    import orjson

    objects = [json.loads(line) for f in sorted(run.rglob("*.jsonl")) for line in f.read_text().splitlines()]
    out: dict = {"rss_mb": 0.0}
    encoders = {
        "stdlib": lambda obj: json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n",
        "orjson": lambda obj: orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, encode in encoders.items():
            start = time.perf_counter()
            with open(Path(tmp) / "out.jsonl", "wb") as fh:
                for obj in objects:
                    fh.write(encode(obj))
            out[f"{name}_s"] = time.perf_counter() - start
            out["bytes"] = (Path(tmp) / "out.jsonl").stat().st_size
    out["rss_mb"] = peak_rss_mb()
    return out


def load_needlehaystack():
    """needlehaystack's tester module, loaded without its package __init__ (which imports langchain) and with
    stand-ins for its evaluator and provider base classes."""
    spec = importlib.util.find_spec("needlehaystack")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("needlehaystack is not installed: .venv/bin/pip install --no-deps needlehaystack==0.1.0 (and numpy)")
    folder = Path(next(iter(spec.submodule_search_locations)))
    package = types.ModuleType("needlehaystack")
    package.__path__ = [str(folder)]
    sys.modules["needlehaystack"] = package
    for name, cls in (("evaluators", "Evaluator"), ("providers", "ModelProvider")):
        stub = types.ModuleType(f"needlehaystack.{name}")
        setattr(stub, cls, type(cls, (), {}))
        sys.modules[f"needlehaystack.{name}"] = stub
    module_spec = importlib.util.spec_from_file_location(
        "needlehaystack.llm_needle_haystack_tester", folder / "llm_needle_haystack_tester.py"
    )
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def part_needlehaystack(run: str) -> dict:
    """needlehaystack's generate_context for the 225 cells, timed; then each context compared with the one nspec
    compiled for the OpenAI model (``run``)."""
    import asyncio
    import glob

    from nspec.compiler.tokenizers import encoding
    from nspec.spec import load_spec

    tester_module = load_needlehaystack()
    # The essays in name order, as nspec reads them: the reference takes them in the order the file system lists them.
    tester_module.glob = types.SimpleNamespace(glob=lambda pattern: sorted(glob.glob(pattern)))
    enc = encoding("cl100k_base").encoding

    class OfflineGpt4:  # the provider interface the tester uses for token work, with tiktoken's GPT-4 encoding
        model_name = "gpt-4"

        def encode_text_to_tokens(self, text):
            return enc.encode_ordinary(text)

        def decode_tokens(self, tokens, context_length=None):
            return enc.decode(tokens[:context_length])

    spec = load_spec(str(SPEC)).data
    grid = spec["grid"]
    package = Path(sys.modules["needlehaystack"].__path__[0])  # load_needlehaystack's stand-in package
    tester = tester_module.LLMNeedleHaystackTester(
        model_to_test=OfflineGpt4(),
        needle=spec["needles"][0]["text"],
        haystack_dir=str(package / "PaulGrahamEssays"),
        retrieval_question=spec["needles"][0]["question"],
        context_lengths_min=grid["context_lengths"]["from"],
        context_lengths_max=grid["context_lengths"]["to"],
        context_lengths_num_intervals=grid["context_lengths"]["steps"],
        document_depth_percent_intervals=grid["depths"]["steps"],
        document_depth_percent_interval_type="sigmoid",
        save_results=False,
        save_contexts=False,
        print_ongoing_status=False,
    )
    lengths = [int(x) for x in tester.context_lengths]
    depths = sorted(float(x) for x in tester.document_depth_percents)
    start = time.perf_counter()
    contexts = {(n, float(d)): asyncio.run(tester.generate_context(n, d)) for n in lengths for d in depths}
    wall = time.perf_counter() - start
    ours = {}
    requests = {}
    for shard in (Path(run) / "answers" / "requests").rglob("*.jsonl"):
        for line in shard.read_text().splitlines():
            request = json.loads(line)
            requests[request["custom_id"]] = request
    for line in (Path(run) / "cells.jsonl").read_text().splitlines():
        cell = json.loads(line)
        if cell["model"].startswith("openai/"):
            key = (cell["context_length"]["target"], cell["depth"]["requested"])
            ours[key] = requests[cell["cell_id"]]["body"]["messages"][1]["content"]
    same = sum(ours.get(key) == text for key, text in contexts.items())
    chars = sum(len(text) for text in contexts.values())
    return {"wall_s": wall, "chars": chars, "rss_mb": peak_rss_mb(), "lengths": lengths, "depths": depths, "same": same}


def run_part(name: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--part", name, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(proc.stderr or proc.stdout)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["nspec", "json", "needlehaystack"])
    parser.add_argument("--skip-needlehaystack", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("arg", nargs="?")
    args = parser.parse_args()
    if args.part == "nspec":
        print(json.dumps(part_nspec(Path(args.arg))))
        return
    if args.part == "json":
        print(json.dumps(part_json_floor(Path(args.arg))))
        return
    if args.part == "needlehaystack":
        print(json.dumps(part_needlehaystack(args.arg)))
        return

    from nspec.compiler import grid
    from nspec.spec import load_spec

    ours_runs, floor_runs = [], []
    kept = tempfile.TemporaryDirectory()  # the last run, whose contexts are compared with needlehaystack's
    for i in range(args.repeat):  # the machine is noisy: medians of fresh processes
        with tempfile.TemporaryDirectory() as out:
            ours_runs.append(run_part("nspec", kept.name if i == args.repeat - 1 else out))
            floor_runs.append(run_part("json", ours_runs[-1]["run"]))
    ours = {**ours_runs[0], **{k: statistics.median(r[k] for r in ours_runs) for k in ("wall_s", "load_s")}}
    floor = {k: statistics.median(r[k] for r in floor_runs) for k in ("stdlib_s", "orjson_s", "bytes", "rss_mb")}
    mb = ours["bytes"] / 1e6
    print(f"kamradt-classic: 225 cells, lengths 1,000-128,000 tokens, cl100k_base ({os.cpu_count()} cores)")
    print(f"medians of {args.repeat} runs, each part in a fresh process")
    print(
        f"nspec compile         {ours['wall_s']:7.2f} s  {mb:7.1f} MB written  {mb / ours['wall_s']:6.1f} MB/s  "
        f"peak RSS {ours['rss_mb']:6.0f} MB"
    )
    for name in ("stdlib", "orjson"):
        wall = floor[f"{name}_s"]
        print(
            f"{name + ' encode+write':21} {wall:7.2f} s  {floor['bytes'] / 1e6:7.1f} MB written  "
            f"{floor['bytes'] / 1e6 / wall:6.1f} MB/s"
        )
    print(f"nspec / stdlib floor  {ours['wall_s'] / floor['stdlib_s']:7.2f} x")
    print(f"nspec / orjson floor  {ours['wall_s'] / floor['orjson_s']:7.2f} x")
    print(f"(before the compile: the spec loaded and validated in {ours['load_s']:.2f} s)")
    if args.skip_needlehaystack:
        kept.cleanup()
        return
    theirs = run_part("needlehaystack", ours_runs[-1]["run"])
    kept.cleanup()
    spec = load_spec(str(SPEC)).data
    same_lengths = theirs["lengths"] == grid.context_lengths(spec["grid"]["context_lengths"])
    same_depths = theirs["depths"] == grid.depths(spec["grid"]["depths"])
    print(
        f"needlehaystack     {theirs['wall_s']:7.2f} s  (225 contexts built, {theirs['chars'] / 1e6:.1f} M chars)  "
        f"peak RSS {theirs['rss_mb']:6.0f} MB"
    )
    print(f"speed-up           {theirs['wall_s'] / ours['wall_s']:7.1f} x faster than needlehaystack")
    print(f"same grid as needlehaystack's formulas: lengths {same_lengths}, depths {same_depths}")
    cells = len(theirs["lengths"]) * len(theirs["depths"])
    print(f"contexts identical to needlehaystack's: {theirs['same']} of {cells}")


if __name__ == "__main__":
    main()
