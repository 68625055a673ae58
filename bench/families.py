"""Compile time and peak memory of the generated task families' specs at 4K to 128K.

Each of specs/{graphwalks,mrcr,nolima,context-rot}.yaml is compiled at each length alone, as written otherwise: its
own models, trials, depths and swept parameters (a spec that includes it sets `grid.context_lengths` only). One
``nspec compile`` process per spec and length: its wall time, CPU time and peak RSS (from wait4, as
bench/ruler.py measures), the cells it wrote and the size of its run directory, which is deleted after measuring
(a length's files are hundreds of MB at 128K).

    .venv/bin/python bench/families.py [--specs graphwalks,mrcr,nolima,context-rot] [--lengths 4096,...,131072]
        [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from ruler import LENGTHS, measured

SPECS = ["graphwalks", "mrcr", "nolima", "context-rot"]


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def compile_once(folder: Path, spec: str, length: int) -> str:
    """One row: ``nspec compile`` of ``spec`` at ``length``, measured; its run directory removed after."""
    name = f"{spec}-{length}"
    bench_spec = folder / f"{name}.yaml"
    bench_spec.write_text(f"nspec: 1\ninclude: {spec}.yaml\nname: {name}\ngrid: {{context_lengths: [{length}]}}\n")
    command = [sys.executable, "-m", "nspec", "compile", bench_spec.name, "-o", str(folder / "out")]
    log = folder / f"{name}.log"
    code, wall, cpu, rss = measured(command, folder, dict(os.environ), log)
    runs = folder / "out" / name
    cells = sum(len(p.read_text().splitlines()) for p in runs.glob("*/cells.jsonl")) if code == 0 else 0
    written = size_mb(runs) if runs.exists() else 0.0
    shutil.rmtree(runs, ignore_errors=True)
    failed = "" if code == 0 else f"  failed: see {log}"
    return f"{spec:12} {length:7d} {cells:6d} {wall:8.1f} {cpu:8.1f} {rss:6.0f} {written:8.0f}{failed}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--specs", default=",".join(SPECS))
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--work", type=Path, default=Path("/tmp/families-bench"))
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    folder = args.work / "compile"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    specs = args.specs.split(",")
    for spec in specs:
        shutil.copy(root / "specs" / f"{spec}.yaml", folder / f"{spec}.yaml")
    print(f"{'spec':12} {'length':>7} {'cells':>6} {'wall s':>8} {'CPU s':>8} {'MB':>6} {'out MB':>8}")
    for spec in specs:
        for length in [int(n) for n in args.lengths.split(",")]:
            print(compile_once(folder, spec, length), flush=True)


if __name__ == "__main__":
    main()
