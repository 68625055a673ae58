"""How far the default grading cascade can be trusted: every rule's decided share and precision on real model answers
labelled by hand (tests/data/grading/answers.jsonl; README.md there says how they were made and labelled).

A rule's precision is the share of its verdicts that agree with the label; its decided share, the share of the kind's
answers it decided. Run: .venv/bin/python bench/grading.py [--markdown] [--wrong]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from nspec import grade

SET = Path(__file__).resolve().parent.parent / "tests" / "data" / "grading" / "answers.jsonl"
KINDS = {"fact": "single-fact needles", "limerick": "limerick (free-text) questions"}


def graded(path: Path = SET) -> list[tuple[dict, object]]:
    """(record, verdict) for every labelled answer of the set."""
    rows = []
    for record in map(json.loads, path.read_text(encoding="utf-8").splitlines()):
        if record["label"] not in ("pass", "fail"):
            continue
        several = len(record["expected"]) > 1  # a multi-value cell needs every value, as `nspec score` grades it
        verdict = grade(
            record["answer"],
            expected=record["expected"] if several else [*record["expected"], *record["alternates"]],
            require="all" if several else "any",
            question=record["question"],
            needle=record["needle"],
        )
        rows.append((record, verdict))
    return rows


def table(rows: list, markdown: bool) -> list[str]:
    by_rule: dict[tuple[str, str], Counter] = defaultdict(Counter)
    totals: Counter = Counter()
    for record, verdict in rows:
        kind = record["kind"]
        totals[kind] += 1
        if verdict.verdict == "undecided":
            continue
        key = (kind, f"{verdict.rule} → {verdict.verdict}")
        by_rule[key]["decided"] += 1
        by_rule[key]["agree"] += verdict.verdict == record["label"]
    lines = []
    header = ["kind", "rule → verdict", "decided", "share of the kind", "precision", "wrong"]
    if markdown:
        lines += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    else:
        lines.append(f"{'kind':9} {'rule → verdict':34} {'decided':>8} {'share':>7} {'precision':>10} {'wrong':>6}")
    for kind in KINDS:
        for (k, rule), c in sorted(by_rule.items()):
            if k != kind:
                continue
            share, precision = c["decided"] / totals[kind], c["agree"] / c["decided"]
            cells = [kind, rule, str(c["decided"]), f"{share:.1%}", f"{precision:.1%}", str(c["decided"] - c["agree"])]
            if markdown:
                lines.append("| " + " | ".join(cells) + " |")
            else:
                lines.append(f"{kind:9} {rule:34} {cells[2]:>8} {cells[3]:>7} {cells[4]:>10} {cells[5]:>6}")
    return lines


def summary(rows: list) -> list[str]:
    lines = []
    for kind, label in [*KINDS.items(), ("all", "all answers")]:
        mine = [(r, v) for r, v in rows if kind == "all" or r["kind"] == kind]
        decided = [(r, v) for r, v in mine if v.verdict != "undecided"]
        agree = sum(v.verdict == r["label"] for r, v in decided)
        share = len(decided) / len(mine) if mine else 0.0
        precision = agree / len(decided) if decided else 0.0
        lines.append(
            f"{label}: {len(mine)} answers, {len(decided)} decided ({share:.1%}), "
            f"{agree} agree with the label ({precision:.2%}), {len(decided) - agree} wrong"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--markdown", action="store_true", help="the rule table as Markdown (docs/scoring.md)")
    parser.add_argument("--wrong", action="store_true", help="list every decided answer that disagrees")
    args = parser.parse_args()
    rows = graded()
    models = Counter(r["model"] for r, _ in rows)
    labels = Counter(r["label"] for r, _ in rows)
    print(f"{len(rows)} labelled answers: " + ", ".join(f"{m} {n}" for m, n in sorted(models.items())))
    negatives = sum(r["negative"] for r, _ in rows)
    print(f"labels: {labels['pass']} pass, {labels['fail']} fail; {negatives} negative controls")
    print("\n".join(table(rows, args.markdown)))
    print("\n".join(summary(rows)))
    if args.wrong:
        for record, verdict in rows:
            if verdict.verdict not in ("undecided", record["label"]):
                print(f"\n{record['id']} [{verdict.rule}: {verdict.reason}] label {record['label']}")
                print(f"  Q: {record['question']}  E: {record['expected']}\n  A: {record['answer']!r}")


if __name__ == "__main__":
    main()
