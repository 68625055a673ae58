"""Audit tools over a scored run (NIAN's): how often each judge dissents, which cells' trials disagree, and the
distinct answers that passed and failed each question. Each reads scores.jsonl a line at a time."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from nspec.runners.run_store import Run


def dissent(run: Run) -> list[dict[str, Any]]:
    """Per judge: how often its vote differs from the panel's verdict, and from the deterministic scorers where a
    scorer decided too (judges asked `when: always`)."""
    run.require("scores")
    stats: dict[str, Counter[str]] = defaultdict(Counter)
    for score in run.scores():
        panel = score.get("judge_verdict")
        scorer = next((s["verdict"] for s in score["scorers"] if s["verdict"] != "undecided"), None)
        for vote in score["votes"]:
            if vote["vote"] is None:  # no verdict: not a vote, so no dissent either
                continue
            judge = stats[vote["judge"]]
            judge["votes"] += 1
            if panel is not None:
                judge["with_panel"] += 1
                judge["against_panel"] += vote["vote"] != panel
            if scorer is not None:
                judge["with_scorer"] += 1
                judge["against_scorer"] += vote["vote"] != scorer
    return [
        {
            "judge": judge,
            "votes": c["votes"],
            "dissent_from_majority": _rate(c["against_panel"], c["with_panel"]),
            "disagrees_with_scorers": _rate(c["against_scorer"], c["with_scorer"]),
            "compared_with_scorers": c["with_scorer"],
        }
        for judge, c in sorted(stats.items())
    ]


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def variance(run: Run) -> list[dict[str, Any]]:
    """Cells whose repeated trials disagree (some pass, some fail), by location; `question` is the stack item
    asked (for text haystacks each trial has its own needle, so there is none)."""
    run.require("scores")
    cells = {c["cell_id"]: c for c in run.cells()}
    groups: dict[tuple[Any, ...], Counter[str]] = defaultdict(Counter)
    for score in run.scores():
        cell = cells[score["cell_id"]]
        if cell["negative"] or score["verdict"] not in ("pass", "fail"):
            continue
        # Trials of a text haystack draw new needles (so new questions); a stack's trials ask the same item.
        key = (
            cell["model"],
            cell["prompt"],
            cell["context_length"]["target"],
            cell["depth"]["requested"],
            cell["repeat"],
            cell["item"],
        )
        groups[key][score["verdict"]] += 1
    out = []
    for (model, prompt, length, depth, repeat, question), counts in sorted(
        groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]), kv[0][2], kv[0][3], str(kv[0][4]), str(kv[0][5]))
    ):
        if counts["pass"] and counts["fail"]:
            out.append(
                {
                    "model": model,
                    "prompt": prompt,
                    "context_length": length,
                    "depth": depth,
                    "repeat": repeat,
                    "question": question,
                    "passes": counts["pass"],
                    "fails": counts["fail"],
                }
            )
    return out


def answers_by_question(run: Run) -> list[dict[str, Any]]:
    """Per question and expected answer (a question asked with different needles is several entries): the distinct
    answers given, passing and failing, with counts — for mining alternate answers to add to the spec."""
    run.require("scores")
    cells = {c["cell_id"]: c for c in run.cells()}
    texts = {r["cell_id"]: (r.get("text") or "").strip() for r in run.results() if r["status"] == "ok"}
    out: dict[tuple[str, tuple[str, ...]], dict[str, Counter[str]]] = {}
    for score in run.scores():
        cell = cells[score["cell_id"]]
        if cell["negative"] or score["verdict"] not in ("pass", "fail") or score["cell_id"] not in texts:
            continue
        entry = out.setdefault(
            (cell["question"], tuple(cell["expected"])), {"passing": Counter(), "failing": Counter()}
        )
        entry["passing" if score["verdict"] == "pass" else "failing"][texts[score["cell_id"]]] += 1
    return [
        {
            "question": question,
            "expected": list(expected),
            "passing": dict(e["passing"].most_common()),
            "failing": dict(e["failing"].most_common()),
        }
        for (question, expected), e in sorted(out.items())
    ]


def ask_questions(
    items: dict[str, str], asked: set[str], count: int, seed: int, read: Any, write: Any
) -> list[dict[str, str]]:
    """Show up to ``count`` random items not asked about yet; for each, read a question and its answer (an empty
    question skips the item). Returns the new question lines. ``read()`` returns the next input line or None at the
    end; ``write(text)`` shows text."""
    from nspec.compiler.draws import Draws

    candidates = [i for i in items if i not in asked]
    new = []
    for item_id in Draws(seed, "questions-tool").sample(candidates, min(count, len(candidates))):
        write(f"\n[{item_id}]\n{items[item_id]}\n")
        write("question (empty to skip): ")
        question = read()
        if question is None:
            break
        if not question.strip():
            continue
        write("answer: ")
        answer = read()
        if answer is None or not answer.strip():
            break
        new.append({"item": item_id, "question": question.strip(), "answer": answer.strip()})
    return new
