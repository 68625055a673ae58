"""Where the needles of every example spec land: each spec compiled as it stands, every needle found in the request
files, and the share that sits between two sentences (or two stack items) counted by the test suite's own rule
(`tests/test_placement.py`), written apart from the compiler's.

Run: .venv/bin/python bench/placement.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nspec.compiler.models import models_of, prompt_variants  # noqa: E402
from nspec.compiler.run_writer import compile_run  # noqa: E402
from nspec.spec import load_spec  # noqa: E402
from nspec.templates import render  # noqa: E402
from tests.test_placement import between_items, between_sentences, without_others  # noqa: E402

MARK = "\x00haystack\x00"


def haystack_of(user: str, template: str, question: str) -> str:
    """The haystack part of a request's user message: the template's text around {haystack} taken off."""
    prefix, suffix = render(template, {"question": question, "haystack": MARK}).split(MARK)
    return user[len(prefix) : len(user) - len(suffix)]


def check(spec_path: Path, out: Path) -> tuple[int, int, list[str]]:
    loaded = load_spec(str(spec_path))
    spec = loaded.data
    run = compile_run(spec, loaded.base_dir, out, {}).path
    templates = {
        (m.label, name): {**prompt, **m.prompt_override}["user"]
        for m in models_of(spec)
        for name, prompt in prompt_variants(spec)
    }
    separator = spec["haystack"].get("separator", "\n\n") if "stack" in spec["haystack"] else None
    users = {}
    for shard in sorted((run / "answers" / "requests").iterdir()):
        with open(shard, encoding="utf-8") as fh:
            for line in fh:
                request = json.loads(line)
                body = request.get("body") or request["params"]
                users[request["custom_id"]] = next(m["content"] for m in body["messages"] if m["role"] == "user")
    needles = good = 0
    bad = []
    with open(run / "cells.jsonl", encoding="utf-8") as fh:
        for line in fh:
            cell = json.loads(line)
            if not cell["needles"]:
                continue
            body = haystack_of(users.pop(cell["cell_id"]), templates[(cell["model"], cell["prompt"])], cell["question"])
            texts = [n["text"] for n in cell["needles"]]
            for needle in cell["needles"]:
                needles += 1
                if separator is not None:
                    block = (needle["text"] + separator) * (cell["repeat"] or 1)
                    at = body.find(block.removesuffix(separator))
                    ok = at >= 0 and between_items(body, at, block.removesuffix(separator), separator)
                else:
                    hay = without_others(body, texts, needle["text"])
                    at = hay.find(needle["text"])
                    ok = at >= 0 and between_sentences(hay, at, needle["text"])
                good += ok
                if not ok:
                    bad.append(f"{cell['cell_id']} at depth {needle['depth_requested']}")
    return needles, good, bad


def main() -> None:
    total = total_good = 0
    with tempfile.TemporaryDirectory() as tmp:
        for spec in sorted((ROOT / "specs").glob("*.yaml")):
            started = time.perf_counter()
            needles, good, bad = check(spec, Path(tmp))
            total, total_good = total + needles, total_good + good
            seconds = time.perf_counter() - started
            print(f"{spec.stem}: {good} of {needles} needles between sentences ({seconds:.1f} s)", flush=True)
            for line in bad[:5]:
                print(f"  misplaced: {line}")
    print(f"all example specs: {total_good} of {total} needles between sentences ({total_good / total:.2%})")


if __name__ == "__main__":
    main()
