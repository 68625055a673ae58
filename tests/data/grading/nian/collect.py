"""Gather the answers NIAN published for the runs that calibrate nspec's grading into answers.jsonl and
questions.json beside this file: every answer with its five judges' votes, the panel's verdict as its label, and where
it came from (file, commit, model, question, position, trial).

    python tests/data/grading/nian/collect.py NIAN_GIT_DIR

NIAN_GIT_DIR is a clone of llmonpy/needle-in-a-needlestack (a bare one will do). Only the three runs of `RUNS` are
read, each listed by its own path: the other runs of `published_tests/` are an independent check of nspec's grading
and are never opened here. The limerick dataset is not read either (its licence is not NIAN's); questions.json holds
the ten question limericks, questions and answers as the runs' results carry them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
COMMIT = "eafb9b3fb01fb9b80569df52e75f1aa0196ee21f"
RUNS = ("16k", "32k", "16_repeat_limerick")
# nspec's own held-out half of the calibration set: every answer of these models is kept out of calibration, so the
# figures on them say how the rules do on models they were not fitted to.
HELD_OUT_MODELS = frozenset({"open-mixtral-8x7b", "open-mixtral-8x22b", "mistral-large-latest"})


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def result_files(repo: Path, run: str) -> list[str]:
    listed = git(repo, "ls-tree", "--name-only", COMMIT, f"published_tests/{run}/").split()
    return sorted(p for p in listed if p.endswith("_full_results.json"))


def answers(path: str, results: dict[str, Any], questions: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    run = path.split("/")[1]
    model = results["model_name"]
    out = []
    for location in results["location_list"]:
        position = location["location_token_position"]
        for asked in location["question_result_list"]:
            q = asked["question"]
            questions.setdefault(
                q["id"],
                {
                    "id": q["id"],
                    "author": q["author"],
                    "limerick": q["text"],
                    "question": q["question"],
                    "answer": q["answer"],
                    "alternates": q.get("alternate_answers") or [],
                },
            )
            for trial in asked["trial_results"]:
                votes = [v["passed"] for v in trial["evaluator_results"]]
                out.append(
                    {
                        "id": f"{run}/{model}/{position}/{q['id']}/{trial['trial_number']}",
                        "half": "held-out" if model in HELD_OUT_MODELS else "calibration",
                        "source": {"file": path, "commit": COMMIT},
                        "run": run,
                        "model": model,
                        "question_id": q["id"],
                        "position": position,
                        "trial": trial["trial_number"],
                        "answer": trial["generated_answer"],
                        "votes": votes,
                        "label": "pass" if sum(votes) > len(votes) - sum(votes) else "fail",
                    }
                )
    return out


def main(repo: Path) -> None:
    questions: dict[int, dict[str, Any]] = {}
    rows = []
    for run in RUNS:
        for path in result_files(repo, run):
            rows += answers(path, json.loads(git(repo, "show", f"{COMMIT}:{path}")), questions)
    (HERE / "answers.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    listed = [questions[k] for k in sorted(questions)]
    (HERE / "questions.json").write_text(json.dumps(listed, indent=1, ensure_ascii=False) + "\n", "utf-8")
    print(f"{len(rows)} answers to {len(listed)} questions")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
