"""The labelled answers the default cascade is calibrated and checked on, as one kind of record, and what grading them
gives, rule by rule (bench/grading.py prints it; tests/test_grading_accuracy.py pins it):

- `nian`: the answers NIAN published for three of its runs (tests/data/grading/nian, README.md there), labelled by
  its five-judge panel; its answers of three models are nspec's own held-out half (`half`);
- `local`: answers of small local models labelled by hand (tests/data/grading/answers.jsonl).

Calibration takes the `nian` calibration half and the `local` set (`CALIBRATION`); the `nian` held-out half is only
ever measured.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from nspec import grade
from nspec.runners.grading.calibration import Tally, key_of
from nspec.runners.grading.cascade import cascade
from nspec.runners.grading.grader import negative
from nspec.scorers import GradeInput, Verdict

DATA = Path(__file__).resolve().parent / "data" / "grading"
SETS = {
    "nian-calibration": "NIAN, calibration half (GPT-3.5, Mistral small and 7B)",
    "nian-held-out": "NIAN, held-out half (Mixtral 8x7B and 8x22B, Mistral large)",
    "local": "local models (270M-1.5B), single-fact needles",
    "local-limerick": "local models (270M-1.5B), limerick questions",
}
CALIBRATION = ("nian-calibration", "local", "local-limerick")


@dataclass(frozen=True)
class Labelled:
    """One labelled answer: which set it is in, what grading it needs, and its label."""

    id: str
    set: str
    model: str
    answer: str
    inp: GradeInput
    label: str
    negative: bool

    def graded(self) -> Verdict:
        """Its verdict, as `nspec.grade` gives it."""
        several = len(self.inp.expected) > 1
        return grade(
            self.answer,
            expected=self.inp.expected if several else [*self.inp.expected, *self.inp.alternates],
            require="all" if several else "any",
            question=self.inp.question,
            needle=self.inp.needle,
        )

    def raw(self) -> Verdict:
        """The verdict its rules find before calibration keeps some of them from deciding."""
        return negative(self.answer, self.inp.question, ()) if self.negative else cascade(self.answer, self.inp)


def _nian() -> list[Labelled]:
    questions = {q["id"]: q for q in json.loads((DATA / "nian" / "questions.json").read_text(encoding="utf-8"))}
    rows = []
    for line in (DATA / "nian" / "answers.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        q = questions[r["question_id"]]
        inp = GradeInput((q["answer"],), tuple(q["alternates"]), q["question"], q["limerick"])
        rows.append(Labelled(r["id"], f"nian-{r['half']}", r["model"], r["answer"], inp, r["label"], False))
    return rows


def _local() -> list[Labelled]:
    rows = []
    for line in (DATA / "answers.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        inp = GradeInput(tuple(r["expected"]), tuple(r["alternates"]), r["question"], r["needle"])
        kind = "local" if r["kind"] == "fact" else "local-limerick"
        rows.append(Labelled(r["id"], kind, r["model"], r["answer"], inp, r["label"], r["negative"]))
    return rows


@cache
def labelled() -> tuple[Labelled, ...]:
    """Every labelled answer of every set."""
    return (*_nian(), *_local())


def of(*sets: str) -> list[Labelled]:
    return [r for r in labelled() if r.set in sets]


def tallies(rows: Iterable[Labelled], calibrated: bool = True) -> dict[str, Tally]:
    """Per rule and verdict ("key-words → pass"): how many answers it decided and how many of them agree with the
    label; with ``calibrated`` false, what the rules find before calibration holds some back."""
    out: dict[str, Tally] = {}
    for row in rows:
        verdict = row.graded() if calibrated else row.raw()
        if verdict.verdict == "undecided":
            continue
        key = key_of(verdict)
        out[key] = out.get(key, Tally()).add(verdict.verdict == row.label)
    return out


def overall(rows: list[Labelled]) -> Counter:
    """Answers, decided and agreeing, over a set."""
    c: Counter = Counter(answers=len(rows))
    for row in rows:
        verdict = row.graded()
        if verdict.verdict != "undecided":
            c.update(decided=1, agree=verdict.verdict == row.label)
    return c


def decided_by_kind() -> dict[str, dict[str, int]]:
    """What `nspec plan` estimates the judges' share from: the answers of each kind of the calibration sets and how
    many the cascade decides (free text: NIAN's calibration half; single facts: the local models' answers to
    needles that are there)."""
    kinds = {"free-text": of("nian-calibration"), "single-fact": [r for r in of("local") if not r.negative]}
    out = {}
    for kind, rows in kinds.items():
        c = overall(rows)
        out[kind] = {"answers": c["answers"], "decided": c["decided"]}
    return out
