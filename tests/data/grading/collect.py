"""Gather the answers of the runs `generate.py` made into answers.jsonl: one record per answered cell, with what
grading needs (question, expected answers, needle) and where it came from (model, question set, spec, cell, settings).
Labels already in answers.jsonl are kept; new answers come in unlabelled (`"label": null`) until labelled by hand.

    python tests/data/grading/collect.py DIR/runs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from nspec.scorers import needle_text

HERE = Path(__file__).resolve().parent
SET = HERE / "answers.jsonl"
KINDS = {
    "magic": "fact",
    "multikey": "fact",
    "multivalue": "fact",
    "uuid": "fact",
    "sandwich": "fact",
    "harbour": "fact",
}
MODELS = ("gemma-3-270m", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")


def records(run: Path) -> list[dict[str, Any]]:
    spec = YAML(typ="safe").load((run / "spec.yaml").read_text(encoding="utf-8"))
    name = run.parent.name  # grading-<set>-<model>
    set_name = name.removeprefix("grading-").split("-", 1)[0]
    params = {m["name"]: m.get("params", {}) for m in spec["models"]}
    cells = {c["cell_id"]: c for c in map(json.loads, (run / "cells.jsonl").read_text().splitlines())}
    out = []
    for line in (run / "answers" / "results.jsonl").read_text().splitlines():
        result = json.loads(line)
        if result.get("status") != "ok" or result.get("stage") != "answers":
            continue
        cell = cells[result["cell_id"]]
        label = cell["model"]
        model = next(m for m in MODELS if label.startswith(m))
        p = params.get(label, {})
        out.append(
            {
                "id": f"{name}/{run.name}/{cell['cell_id']}",
                "kind": KINDS.get(set_name, "limerick"),
                "set": set_name,
                "model": model,
                "spec": name,
                "run": run.name,
                "cell": cell["cell_id"],
                "settings": {
                    "prompt": label.removeprefix(model).lstrip("-") or "plain",
                    "context_tokens": cell["context_length"]["target"],
                    "depth": cell["depth"]["requested"],
                    "trial": cell["trial"],
                    "seed": spec["seed"],
                    "temperature": p.get("temperature"),
                    "max_tokens": p.get("max_tokens"),
                },
                "question": cell["question"],
                "expected": cell["expected"],
                "alternates": cell.get("alternates", []),
                "needle": needle_text(cell),
                "negative": cell["negative"],
                "answer": result["text"],
                "label": None,
            }
        )
    return out


def main() -> None:
    runs = Path(sys.argv[1])
    old = {r["id"]: r for r in map(json.loads, SET.read_text().splitlines())} if SET.exists() else {}
    new: dict[str, dict[str, Any]] = {}
    for run in sorted(p.parent for p in runs.glob("*/*/*/cells.jsonl")):
        if not (run / "answers" / "results.jsonl").exists():
            continue
        for record in records(run):
            kept = old.get(record["id"])
            if kept is not None:
                record["label"] = kept.get("label")
                if kept.get("note"):
                    record["note"] = kept["note"]
            new[record["id"]] = record
    for key, record in old.items():
        new.setdefault(key, record)
    SET.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in new.values()), encoding="utf-8")
    print(f"{len(new)} answers, {sum(r['label'] is None for r in new.values())} unlabelled")


if __name__ == "__main__":
    main()
