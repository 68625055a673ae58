"""The default cascade measured on real model answers labelled by hand (tests/data/grading/answers.jsonl, README.md
there): every rule decides only with at least 99% precision, and the cascade decides enough that the judges are left
the doubtful rest. Each rule's abstention boundary is shown on answers of the set. The written answers of
tests/grading/labelled.yaml are a regression check only."""

import json
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from nspec import grade
from nspec.runners.grading.cascade import UNMEASURED, cascade
from nspec.scorers import GradeInput

HERE = Path(__file__).parent
REAL = HERE / "data" / "grading" / "answers.jsonl"
WRITTEN = HERE / "grading" / "labelled.yaml"


@cache
def records() -> list[dict]:
    return [json.loads(line) for line in REAL.read_text(encoding="utf-8").splitlines()]


def real(key: str) -> dict:
    """The record of a question set, run id and the end of a cell id."""
    set_name, run, cell = key.split("/")
    (record,) = [r for r in records() if (r["set"], r["run"]) == (set_name, run) and r["cell"].endswith(cell)]
    return record


def graded(record):
    several = len(record["expected"]) > 1  # a multi-value cell needs every value, as `nspec score` grades it
    return grade(
        record["answer"],
        expected=record["expected"] if several else [*record["expected"], *record["alternates"]],
        require="all" if several else "any",
        question=record["question"],
        needle=record["needle"],
    )


def test_every_rule_is_precise_on_real_answers_and_the_cascade_decides_enough():
    rules: dict[str, Counter] = defaultdict(Counter)
    kinds: dict[str, Counter] = defaultdict(Counter)
    for record in records():
        verdict = graded(record)
        kinds[record["kind"]]["answers"] += 1
        if verdict.verdict == "undecided":
            continue
        right = verdict.verdict == record["label"]
        rules[f"{verdict.rule} → {verdict.verdict}"].update(decided=1, right=right)
        kinds[record["kind"]].update(decided=1, right=right)
    for rule, c in rules.items():
        assert c["right"] >= 0.99 * c["decided"], (rule, c)
    fact, limerick = kinds["fact"], kinds["limerick"]
    assert fact["decided"] >= 0.85 * fact["answers"] and fact["right"] >= 0.995 * fact["decided"], fact
    assert limerick["decided"] >= 0.60 * limerick["answers"], limerick
    assert limerick["right"] >= 0.99 * limerick["decided"], limerick


def test_the_real_set_is_labelled_and_both_labels_and_models_occur():
    rows = records()
    assert len(rows) >= 150 and all(r["label"] in ("pass", "fail") for r in rows)
    assert {r["label"] for r in rows} == {"pass", "fail"} and {r["kind"] for r in rows} == {"fact", "limerick"}
    assert len({r["model"] for r in rows}) >= 2 and any(r["negative"] for r in rows)


# Each rule at its boundary, on answers of the set: (question set/run/cell id's end, verdict, rule), the answer in the
# comment.
BOUNDARIES = [
    # a paraphrase stays for the judges; the key words pass
    ("limerick/124a2530c0b4/09c95a02", "undecided", "partial"),  # 'A large quantity of figs.'
    ("limerick/124a2530c0b4/29ba1059", "pass", "key-words"),  # 'He rode on a cream-coloured ass.'
    ("limerick/c22fb0698449/ac3c06ac", "pass", "key-words"),  # '…spent all his money on onions and honey.'
    ("harbour/ff8ce954c62c/d51f7eca", "undecided", "no-key-words"),  # names no captain
    # doubt holds a pass back: other numbers; a hedge, unless the needle says it too ("nine, more or less")
    ("harbour/559400a63f5c/acc23e93", "undecided", "key-words"),  # '17:00' for Day 17
    ("limerick/c22fb0698449/b1ebde2a", "pass", "key-words"),  # 'nine, more or less'
    # the expected uuid, whole
    ("uuid/970acf391a2d/69ffed8f", "pass", "uuid"),
    # conflicting values of the expected kind fail
    ("harbour/559400a63f5c/28af7bec", "fail", "conflicting-value"),  # '100 crates of linen.'
    ("harbour/559400a63f5c/2093cbb1", "fail", "conflicting-value"),  # 'Felix Dunn'
    ("harbour/ff8ce954c62c/72fcde2b", "fail", "conflicting-value"),  # '…was Felix Dunn.'
    ("uuid/5448c0124064/ba2a880f", "fail", "conflicting-value"),  # '4893f8f8-f0d1-45b1-9b21'
    # yes/no: the opening stance, or the question restated
    ("limerick/124a2530c0b4/94dbee1b", "pass", "polar"),  # 'Yes, it does.'
    ("limerick/124a2530c0b4/000befc6", "fail", "polar"),  # 'Yes, she complained.'
    ("limerick/1f35e3551721/3cee5128", "pass", "polar"),  # 'No, the Old Man of Kilkenny never had more…'
    ("limerick/1f35e3551721/515cb982", "fail", "polar"),  # restates: complained
    # negative controls
    ("magic/7d24971e3daf/f081a738", "fail", "negative.invents-value"),  # '10000000000000000000000'
    ("uuid/970acf391a2d/67cc2687", "pass", "negative.not-found"),  # 'UNANSWERABLE'
    ("limerick/124a2530c0b4/f081a738", "fail", "negative.answers"),  # 'No, he never had more than a penny.'
]  # fmt: skip


@pytest.mark.parametrize("key, verdict, rule", BOUNDARIES)
def test_rule_boundaries_on_real_answers(key, verdict, rule):
    record = real(key)
    v = graded(record)
    assert (v.verdict, v.rule) == (verdict, rule), (record["answer"], v.reason)
    if verdict != "undecided":
        assert verdict == record["label"]


def test_written_answers_are_not_decided_against_their_labels():
    rows = []
    for item in YAML(typ="safe").load(WRITTEN.read_text(encoding="utf-8")):
        for label, answer in item["answers"]:
            v = grade(
                answer,
                expected=item["expected"] + item.get("alternates", []),
                question=item["question"],
                needle=item.get("needle"),
                require=item.get("require", "any"),
            )
            rows.append((label, v.verdict))
    decided = [(label, v) for label, v in rows if v != "undecided"]
    wrong = sum(label != v for label, v in decided)
    # Many of these written answers are refusals and "not found"s, which rules not yet measured leave to the judges.
    assert len(rows) >= 300 and len(decided) >= 0.55 * len(rows)
    assert wrong <= 0.01 * len(decided), wrong


def test_a_rule_decides_only_once_measured_on_real_answers():
    """Every rule that decides an answer of the set is measured there (the test above bounds its precision); a rule
    held back (`UNMEASURED`) decides none of them, else it can be measured now: take it out."""
    decided_by = Counter()
    for record in records():
        if record["negative"]:  # negative controls have rules of their own
            continue
        inp = GradeInput(tuple(record["expected"]), tuple(record["alternates"]), record["question"], record["needle"])
        found = cascade(record["answer"], inp)
        if found.verdict != "undecided":
            decided_by[found.rule] += 1
    assert not {rule: n for rule, n in decided_by.items() if rule in UNMEASURED}, "measured now: take it out"
    held = grade("I'm sorry, but I can't help with that.", expected=["4518823"], question="What is the number?")
    assert (held.verdict, held.rule) == ("undecided", "refusal")
