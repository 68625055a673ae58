"""How much grading needs no judge: run example specs end to end against the emulator's oracle (degraded so that
some answers are wrong) and count the cells the deterministic scorers decided.

The example is included unchanged; the wrapper only points its models and judges at the emulator.
Run: .venv/bin/python bench/grading.py [--keep DIR]   (DIR keeps the run directories and their reports)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections import Counter
from pathlib import Path

from nspec.cli import main
from nspec.runners.emulator import Emulator, EmulatorConfig
from nspec.runners.emulator.config import Degrade, Responder, Timing
from nspec.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent


def wrapper(example: str, emu: Emulator, folder: Path) -> Path:
    data = load_spec(str(ROOT / "specs" / f"{example}.yaml")).data

    def local(model: dict) -> dict:
        provider = model["id"].split("/", 1)[0]
        url = emu.anthropic_base_url if provider == "anthropic" else emu.openai_base_url
        return {"id": model["id"], "mode": model.get("mode", "auto"), "base_url": url}

    scoring = []
    for entry in data.get("scoring") or []:
        if "judge" in entry:
            entry = {"judge": {**entry["judge"], "models": [local(m) for m in entry["judge"]["models"]]}}
        scoring.append(entry)
    spec = folder / f"{example}.yaml"
    spec.write_text(
        json.dumps(
            {
                "include": os.path.relpath(ROOT / "specs" / f"{example}.yaml", folder),
                "models": [local(m) for m in data["models"]],
                **({"scoring": scoring} if scoring else {}),
                "run": {"poll": {"min_seconds": 0.2, "max_seconds": 1}},
            }
        )
    )
    return spec


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", help="folder that keeps the run directories (default: a temporary one)")
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "bench")
    os.environ.setdefault("ANTHROPIC_API_KEY", "bench")
    degrade = Degrade(miss_beyond_depth=85, miss_beyond_tokens=64_000, miss_rate=0.05)
    config = EmulatorConfig(
        seed=1,
        responder=Responder(degrade=degrade),
        timing=Timing(validate_seconds=0.1, seconds_per_request=0.0005, finalize_seconds=0.1),
    )
    with Emulator(config) as emu, tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        examples = sorted(
            p.stem for p in (ROOT / "specs").glob("*.yaml") if p.stem != "quickstart"
        )  # quickstart: local
        for example in examples:
            spec = wrapper(example, emu, Path(tmp))
            code = main(["run", str(spec), "--wait", "-o", str(Path(tmp) / "out")])
            run = next(p for p in (Path(tmp) / "out" / example).iterdir())
            scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
            decided = sum(s["scorer_verdict"] in ("pass", "fail") for s in scores)
            judged = sum(bool(s["votes"]) for s in scores)
            verdicts = Counter(s["verdict"] for s in scores)
            cells = len((run / "cells.jsonl").read_text().splitlines())
            print(
                f"{example}: exit {code}; {len(scores)} of {cells} cells graded, {decided} "
                f"({decided / len(scores):.1%}) decided without a judge, {judged} sent to judges; "
                f"final verdicts {dict(verdicts)}"
            )


if __name__ == "__main__":
    main_bench()
