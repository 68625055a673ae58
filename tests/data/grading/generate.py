"""Generate the real model answers of the grading set: run the question sets below with `nspec run` on local models
(labels are added by hand afterwards; see README.md).

    python tests/data/grading/generate.py --out DIR --nian NIAN/full_questions.json \
        --model gemma-3-270m --model qwen2.5-coder-0.5b-instruct=PATH.gguf [--sets magic,nian] [--seed 30] \
        [--lengths 2000,4000 --depths 50 --prompts terse]

`--lengths`, `--depths` and `--prompts` replace a model's plan (longer contexts, where small models miss the needle
and say it is not there; the `terse` prompt, which offers UNANSWERABLE, for the base model too).

`--model NAME` is the embedded model; `NAME=PATH` any GGUF file (the path stays out of what is written: answers
name the model). NIAN's ten question limericks come from its published full_questions.json (`--nian`); the other
limericks are Edward Lear's (public domain) and nspec's own, in specs/lear.txt. Runs go to DIR/runs (a set already
run for a model and seed is skipped); `collect.py DIR/runs` gathers their answers into answers.jsonl.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
HARBOUR = ROOT / "specs" / "data" / "harbour-log.jsonl"

# A chat-tuned GGUF reads its own template; the local engine renders plain text, so the template's markers are
# written into the prompt (llama.cpp reads them as the special tokens they are).
CHATML_USER = "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>"
CHATML_PREFILL = "<|im_start|>assistant"

SYSTEMS = {
    "terse": "You answer questions about a document. Reply with the answer only, or UNANSWERABLE if the document "
    "does not contain it.",
    "free": "You are a helpful assistant. Answer the question using the text provided.",
    "limerick": "You are given a list of limericks. Answer the question about one of them.",
}


def limerick_items(nian: Path) -> list[dict[str, str]]:
    items = []
    for line in (HERE / "specs" / "lear.txt").read_text(encoding="utf-8").splitlines():
        key, text = line.split("|", 1)
        items.append({"id": key, "text": text.replace("\\n", "\n")})
    for q in json.loads(nian.read_text(encoding="utf-8")):
        items.append({"id": f"nian-{q['id']}", "text": q["text"]})
    return items


def nian_questions(nian: Path) -> list[dict[str, Any]]:
    return [
        {"item": f"nian-{q['id']}", "question": q["question"], "answer": q["answer"].strip()}
        for q in json.loads(nian.read_text(encoding="utf-8"))
    ]


def harbour_questions(seed: int = 5, per_kind: int = 5) -> list[dict[str, Any]]:
    """Questions about single harbour-log entries: a count, a captain, a port, a day (one entry per ship and cargo)."""
    entry = re.compile(
        r"Day (\d+): the (.+?) came in from (.+?) (?:at|in|under) .*captain (.+?), and landed (\d+) crates of (.+)\.$"
    )
    rows = [json.loads(line) for line in HARBOUR.read_text(encoding="utf-8").splitlines()]
    parsed = [(r["id"], *entry.match(r["text"]).groups()) for r in rows]  # type: ignore[union-attr]
    pairs: dict[tuple[str, str], int] = {}
    for _, _, ship, _, _, _, cargo in parsed:
        pairs[(ship, cargo)] = pairs.get((ship, cargo), 0) + 1
    unique = [p for p in parsed if pairs[(p[2], p[6])] == 1]
    rng = random.Random(seed)
    rng.shuffle(unique)
    kinds = [
        ("How many crates of {cargo} did the {ship} land?", lambda p: p[5]),
        ("Who was the captain of the {ship} when it landed {cargo}?", lambda p: p[4]),
        ("From which port did the {ship} bring its {cargo}?", lambda p: p[3]),
        ("On which day did the {ship} land its {cargo}?", lambda p: f"Day {p[1]}"),
    ]
    out = []
    for k, (template, answer) in enumerate(kinds):
        for p in unique[k * per_kind : (k + 1) * per_kind]:
            out.append({"item": p[0], "question": template.format(ship=p[2], cargo=p[6]), "answer": answer(p)})
    return out


def question_sets(build: Path, nian: Path) -> dict[str, dict[str, Any]]:
    """The spec of each question set, without models (the driver adds them)."""
    items = build / "limericks.jsonl"
    items.write_text("".join(json.dumps(i) + "\n" for i in limerick_items(nian)), encoding="utf-8")
    (build / "limerick-questions.jsonl").write_text((HERE / "specs" / "limerick-questions.jsonl").read_text())
    (build / "nian-questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in nian_questions(nian)))
    shutil.copy(HARBOUR, build / "harbour-log.jsonl")
    (build / "harbour-questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in harbour_questions()))
    magic = {
        "id": "magic",
        "text": "The special magic {city} number is: {number}.",
        "question": "What is the special magic {city} number?",
        "answer": "{number}",
        "vars": {"city": {"choice": "cities"}, "number": {"digits": 7}},
    }
    multikey = {
        "id": "key",
        "text": "One of the special magic numbers for {key} is: {value}.",
        "question": "What is the special magic number for {key}?",
        "answer": "{value}",
        "distractors": 3,
        "vars": {"key": {"words": 2}, "value": {"digits": 7}},
    }
    multivalue = {  # RULER's niah_multivalue: several values under one key, all asked for
        "id": "values",
        "text": "One of the special magic numbers for {key} is: {value}.",
        "question": "What are all the special magic numbers for {key} mentioned in the provided text?",
        "answer": "{value}",
        "count": 3,
        "vars": {"key": {"words": 2, "scope": "cell"}, "value": {"digits": 7}},
    }
    uuid = {
        "id": "uuid",
        "text": "One of the special magic uuids for {key} is: {value}.",
        "question": "What is the special magic uuid for {key}?",
        "answer": "{value}",
        "distractors": 2,
        "vars": {"key": {"words": 2}, "value": {"uuid": True}},
    }
    sandwich = {
        "id": "sandwich",
        "text": "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.",
        "question": "What is the best thing to do in San Francisco?",
        "answer": "eat a sandwich and sit in Dolores Park on a sunny day",
    }

    def stack(questions: str, per_trial: int) -> dict[str, Any]:
        return {
            "stack": {"items": "limericks.jsonl", "questions": questions, "questions_per_trial": per_trial},
            "separator": "\n\n",
            "vary": "shuffle",
        }

    return {
        "magic": {"haystack": {"corpus": "austen", "vary": "shuffle"}, "needles": [magic], "kind": "fact"},
        "multikey": {"haystack": {"noise": True}, "needles": [multikey], "kind": "fact"},
        "multivalue": {"haystack": {"noise": True}, "needles": [multivalue], "kind": "fact", "max_tokens": 48},
        "uuid": {"haystack": {"noise": True}, "needles": [uuid], "kind": "fact"},
        "sandwich": {"haystack": {"corpus": "austen", "vary": "offset"}, "needles": [sandwich], "kind": "fact"},
        "harbour": {
            "haystack": {
                "stack": {
                    "items": "harbour-log.jsonl",
                    "questions": "harbour-questions.jsonl",
                    "questions_per_trial": 4,
                },
                "separator": "\n",
                "vary": "shuffle",
            },
            "kind": "stack",
        },
        "limerick": {"haystack": stack("limerick-questions.jsonl", 8), "kind": "limerick"},
        "nian": {"haystack": stack("nian-questions.jsonl", 5), "kind": "limerick"},
    }


# Per model: context lengths, depths, trials per kind of question set (one negative control per length and trial),
# sampling. Small on purpose: the answers were made on two shared CPU cores.
PLANS: dict[str, dict[str, Any]] = {
    "gemma-3-270m": {
        "lengths": [800],
        "depths": [10, 90],
        "trials": {"fact": 1, "stack": 1, "limerick": 1},
        "temperature": 0,
    },
    "qwen2.5-coder-0.5b-instruct": {
        "lengths": [400],
        "depths": [50],
        "trials": {"fact": 1, "stack": 2, "limerick": 2},
        "temperature": 0.5,
    },
    "qwen2.5-coder-1.5b-instruct": {
        "lengths": [400],
        "depths": [50],
        "trials": {"fact": 1, "stack": 1, "limerick": 1},
        "temperature": 0.5,
    },
}


def model_spec(
    name: str, path: str | None, kind: str, prompts: list[str] | None, max_tokens: int | None
) -> list[dict[str, Any]]:
    """The model entries (one per prompt variant) a set is run with."""
    plan = PLANS[name]
    model_id = f"local/{path}" if path else f"local/{name}"
    params = {"temperature": plan["temperature"], "max_tokens": max_tokens or (60 if path else 24)}
    if not path:  # the embedded base model continues text: an answer cue, and a stop at the paragraph's end
        default = "limerick" if kind == "limerick" else "free"
        entries = []
        for variant in prompts or [default]:
            prompt = {"system": SYSTEMS[variant], "user": "{haystack}\n\nQuestion: {question}", "prefill": "Answer:"}
            label = name if variant == default else f"{name}-plain-{variant}"
            entries.append({"id": model_id, "name": label, "params": {**params, "stop": ["\n\n"]}, "prompt": prompt})
        return entries
    variants = ["limerick"] if kind == "limerick" else prompts or ["terse", "free"]
    entries = []
    for variant in variants:
        user = CHATML_USER.format(system=SYSTEMS[variant], user="{haystack}\n\n{question}")
        entries.append(
            {
                "id": model_id,
                "name": f"{name}-{variant}",
                "params": params,
                "prompt": {"user": user, "prefill": CHATML_PREFILL},
            }
        )
    return entries


def write_spec(
    build: Path, set_name: str, body: dict[str, Any], name: str, path: str | None, args: argparse.Namespace
) -> Path:
    plan = {**PLANS[name], **{k: v for k, v in (("lengths", args.lengths), ("depths", args.depths)) if v}}
    seed = args.seed
    kind = body["kind"]
    spec: dict[str, Any] = {
        "nspec": 1,
        "name": f"grading-{set_name}-{name}",
        "seed": seed,
        "haystack": body["haystack"],
        "grid": {
            "context_lengths": plan["lengths"],
            "depths": plan["depths"],
            "trials": plan["trials"][kind],
            "negative_controls": 1,
        },
        "prompt": {"user": "{haystack}\n\n{question}", "reserve_tokens": 64},
        "models": model_spec(name, path, kind, args.prompts, body.get("max_tokens")),
        "scoring": [{"auto": True}],
    }
    if "needles" in body:
        spec["needles"] = body["needles"]
    if "stack" in body["haystack"]:
        spec["haystack"]["repeat"] = "allow"
    out = build / f"{set_name}-{name}-s{seed}.json"
    out.write_text(json.dumps(spec, indent=1), encoding="utf-8")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--nian", required=True, type=Path)
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--sets", default="magic,multikey,uuid,sandwich,harbour,limerick,nian")
    parser.add_argument("--seed", type=int, default=29, help="another seed draws other needles, haystacks, questions")
    numbers = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    parser.add_argument("--lengths", type=numbers, help="context lengths in tokens, for every model")
    parser.add_argument("--depths", type=numbers, help="needle depths in percent, for every model")
    parser.add_argument("--prompts", type=lambda text: text.split(","), help="prompt variants (not for limericks)")
    args = parser.parse_args()
    build = args.out / "build"
    build.mkdir(parents=True, exist_ok=True)
    sets = question_sets(build, args.nian)
    for model in args.model:
        name, _, path = model.partition("=")
        for set_name in args.sets.split(","):
            spec = write_spec(build, set_name, sets[set_name], name, str(Path(path).resolve()) if path else None, args)
            runs = args.out / "runs"
            if (runs / spec.stem / "done").exists():
                continue
            print(f"== {spec.stem}", flush=True)
            code = subprocess.call(
                [sys.executable, "-m", "nspec", "run", str(spec), "--wait", "-o", str(runs / spec.stem)]
            )
            print(f"== {spec.stem}: exit {code}", flush=True)
            (runs / spec.stem / "done").write_text(str(code))


if __name__ == "__main__":
    main()
