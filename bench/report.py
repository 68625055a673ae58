"""Report benchmark: a run of about N cells (two models, answered and graded synthetically: pass rates falling
with length and towards the middle depths, a three-judge panel on a fifth of the cells) is built into its report in a
fresh process; printed: build time, peak memory (max RSS) and the page's weight.

Run: .venv/bin/python bench/report.py [--cells 10000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = """\
nspec: 1
name: bench-report
seed: 11
haystack: {{corpus: austen}}
needles:
  - text: "The special magic {{city}} number is: {{n}}."
    question: "What is the special magic {{city}} number?"
    answer: "{{n}}"
    vars: {{city: {{choice: cities}}, n: {{digits: 7}}}}
grid:
  context_lengths: {{from: 1000, to: 4000, steps: 6, spacing: log}}
  depths: {{from: 0, to: 100, steps: 11}}
  trials: {trials}
  negative_controls: true
prompt: {{user: "{{haystack}}\\n\\n{{question}}", reserve_tokens: 30}}
models:
  - {{id: openai/gpt-4.1-mini, mode: batch}}
  - {{id: anthropic/claude-haiku-4-5, mode: batch}}
scoring:
  - contains: "{{answer}}"
"""


def make_run(folder: Path, cells: int) -> Path:
    from nspec.compiler.run_writer import compile_run
    from nspec.spec import load_spec

    trials = max(1, round(cells / (2 * 6 * 12)))
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.format(trials=trials))
    loaded = load_spec(str(spec))
    run = compile_run(loaded.data, loaded.base_dir, folder / "out", {}).path
    rng = random.Random(5)
    with (
        open(run / "cells.jsonl") as lines,
        open(run / "answers" / "results.jsonl", "w") as results,
        open(run / "scores.jsonl", "w") as scores,
    ):
        for line in lines:
            cell = json.loads(line)
            length, depth = cell["context_length"]["target"], cell["depth"]["requested"] or 50
            strength = 0.97 if cell["model"].startswith("openai") else 0.9
            p = strength - 0.3 * (length / 4000) * (1 - abs(depth - 50) / 50)
            passed = rng.random() < (0.9 if cell["negative"] else p)
            if cell["negative"]:
                text = "The text does not say." if passed else "It is 1234567."
            else:
                text = f"The special magic number is: {cell['expected'][0]}." if passed else "I could not find it."
            source = {"kind": "batch", "batch_id": "batch_bench", "attempt": 1}
            usage = {"input_tokens": cell["context_length"]["prompt"], "output_tokens": 12}
            record = {"cell_id": cell["cell_id"], "stage": "answers", "model": cell["model"], "status": "ok"}
            record |= {"text": text, "finish_reason": "stop", "usage": usage, "error": None, "source": source}
            results.write(json.dumps(record) + "\n")
            verdict = "pass" if passed else "fail"
            votes = []
            if rng.random() < 0.2:
                votes = [
                    {
                        "judge": j,
                        "attempt": 1,
                        "vote": verdict if rng.random() < 0.9 else "fail",
                        "detail": "",
                        "reply": f"{'aaa' if verdict == 'pass' else 'bbb'}: the answer matches",
                        "pending": False,
                    }
                    for j in ("openai/gpt-4.1", "anthropic/claude-sonnet-4-5", "openai/gpt-4o-mini")
                ]
            score = {
                "cell_id": cell["cell_id"],
                "model": cell["model"],
                "prompt": None,
                "negative": cell["negative"],
                "scorers": [{"scorer": "contains", "verdict": verdict, "reason": "", "score": None}],
                "votes": votes,
                "verdict": verdict,
                "score": float(passed),
                "reason": "contains",
            }
            scores.write(json.dumps(score) + "\n")
    return run


def build(run: Path) -> None:
    """In this process: build the report and print its figures as JSON."""
    from nspec.runners.report import build_report
    from nspec.runners.run_store import Run

    start = time.perf_counter()
    page = build_report([Run(run)])
    seconds = time.perf_counter() - start
    with open(run / "cells.jsonl") as fh:
        cells = sum(1 for _ in fh)
    data = sum(p.stat().st_size for p in (page.parent / "cells").iterdir())
    print(
        json.dumps(
            {
                "cells": cells,
                "seconds": round(seconds, 2),
                "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                "page_mb": round(page.stat().st_size / 1e6, 2),
                "cell_data_mb": round(data / 1e6, 2),
                "cells_csv_mb": round((page.parent / "cells.csv").stat().st_size / 1e6, 2),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--keep", help="build in this folder and keep it")
    parser.add_argument("--build", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        build(Path(args.build))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        run = make_run(folder, args.cells)
        out = subprocess.run([sys.executable, __file__, "--build", str(run)], capture_output=True, text=True)
        if out.returncode:
            sys.exit(out.stderr)
        figures = json.loads(out.stdout)
        print(
            f"{figures['cells']:,} cells: report built in {figures['seconds']} s, "
            f"peak memory {figures['max_rss_mb']} MB; "
            f"page {figures['page_mb']} MB, cell browser data {figures['cell_data_mb']} MB, "
            f"cells.csv {figures['cells_csv_mb']} MB"
        )


if __name__ == "__main__":
    main()
