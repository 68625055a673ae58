"""The default cascade measured on labelled answers of real models (tests/grading_sets.py; bench/grading.py prints
the tables): the calibration table grading reads is what the calibration sets give; a rule decides only where the
lower bound of its measured precision clears the target; each rule's decided share and precision on every set is
pinned; the targets hold on the held-out half; no rule is keyed on NIAN's questions, limericks or answers; and
answers that are not text, are empty, huge or of mixed scripts get a verdict or "undecided", fast."""

import json
import re
import time
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from nspec import grade
from nspec.runners.grading import calibration
from nspec.runners.grading.calibration import TARGET, Tally, key_of
from tests.grading_sets import CALIBRATION, DATA, SETS, Labelled, decided_by_kind, labelled, of, tallies

HERE = Path(__file__).parent
WRITTEN = HERE / "grading" / "labelled.yaml"
SRC = HERE.parent / "src" / "nspec"
RULES = [*sorted((SRC / "runners" / "grading").glob("*.py")), SRC / "scorers.py"]


@cache
def graded() -> dict[str, list[tuple[Labelled, object]]]:
    """Every labelled answer with its verdict, by set."""
    out: dict[str, list] = {name: [] for name in SETS}
    for row in labelled():
        out[row.set].append((row, row.graded()))
    return out


def test_the_stored_calibration_is_what_the_calibration_sets_give():
    """calibration.json, which grading and `nspec plan` read, is measured on the committed sets: `bench/grading.py
    --write`."""
    assert tallies(of(*CALIBRATION), calibrated=False) == calibration.measured()
    assert decided_by_kind() == calibration.stored()["kinds"]


def test_a_rule_decides_only_where_its_lower_bound_clears_the_target():
    for name, rows in graded().items():
        for row, verdict in rows:
            if verdict.verdict == "undecided" or verdict.scorer == "negative":
                continue
            assert calibration.measured()[key_of(verdict)].lower >= TARGET, (name, row.id, verdict)
    held = grade("I'm sorry, but I can't help with that.", expected=["4518823"], question="What is the number?")
    assert (held.verdict, held.rule) == ("undecided", "refusal") and "would fail" in held.reason


# Per set, per rule: (decided, agreeing with the label), as `nspec.grade` decides. A change to the rules that moves
# these is measured here: update them from `python bench/grading.py`, and docs/scoring.md with them.
PINNED = {
    "nian-calibration": {
        "conflicting-value → fail": (79, 79),
        "equals → pass": (136, 136),
        "key-words → pass": (1728, 1720),
        "not-found → fail": (110, 110),
        "other-text → fail": (102, 102),
        "polar → pass": (260, 260),
    },
    "nian-held-out": {
        "conflicting-value → fail": (14, 14),
        "equals → pass": (19, 19),
        "key-words → pass": (903, 903),
        "not-found → fail": (155, 155),
        "other-text → fail": (92, 90),
        "polar → pass": (90, 90),
    },
    "local": {
        "conflicting-value → fail": (69, 69),
        "equals → pass": (23, 23),
        "key-words → pass": (22, 22),
        "negative.answers → fail": (40, 40),
        "negative.invents-value → fail": (20, 20),
        "negative.not-found → pass": (3, 3),
    },
    "local-limerick": {
        "conflicting-value → fail": (2, 2),
        "equals → pass": (2, 2),
        "key-words → pass": (44, 44),
        "negative.answers → fail": (9, 9),
        "polar → pass": (4, 4),
    },
}


@pytest.mark.parametrize("name", sorted(SETS))
def test_each_rules_decided_share_and_precision_are_pinned(name):
    found: dict[str, Tally] = {}
    for row, verdict in graded()[name]:
        if verdict.verdict != "undecided":
            found[key_of(verdict)] = found.get(key_of(verdict), Tally()).add(verdict.verdict == row.label)
    assert {k: (t.decided, t.agree) for k, t in found.items()} == PINNED[name]


def _overall(rows) -> Counter:
    c: Counter = Counter(answers=len(rows))
    for row, verdict in rows:
        if verdict.verdict != "undecided":
            c.update(decided=1, agree=verdict.verdict == row.label)
    return c


def test_the_targets_hold_on_the_held_out_half_and_the_local_single_fact_needles():
    """Large models' free-text answers (NIAN's, of models calibration never saw): at least 70% decided at 99.0%
    agreement with the panel or better. Single-fact needles (the local models' answers, the needle present): at
    least 85% decided at 99.5% or better."""
    held_out = _overall(graded()["nian-held-out"])
    assert held_out["decided"] >= 0.70 * held_out["answers"], held_out
    assert held_out["agree"] >= 0.990 * held_out["decided"], held_out
    facts = _overall([(r, v) for r, v in graded()["local"] if not r.negative])
    assert facts["decided"] >= 0.85 * facts["answers"] and facts["agree"] >= 0.995 * facts["decided"], facts


def test_the_sets_hold_what_their_readmes_say():
    nian = [json.loads(line) for line in (DATA / "nian" / "answers.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(nian) == 5250 and len({r["id"] for r in nian}) == 5250
    assert {r["source"]["file"].split("/")[1] for r in nian} == {"16k", "32k", "16_repeat_limerick"}
    assert all(r["label"] == ("pass" if sum(r["votes"]) >= 3 else "fail") and len(r["votes"]) == 5 for r in nian)
    held_out = {r["model"] for r in nian if r["half"] == "held-out"}
    assert held_out == {"open-mixtral-8x7b", "open-mixtral-8x22b", "mistral-large-latest"}
    assert not held_out & {r["model"] for r in nian if r["half"] == "calibration"}
    local = of("local", "local-limerick")
    assert len(local) == 287 and {r.label for r in local} == {"pass", "fail"} and any(r.negative for r in local)


# Each rule at its boundary, on answers of the local set: (question set/run/cell id's end, verdict, rule), the answer
# in the comment.
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
    ("uuid/970acf391a2d/69ffed8f", "pass", "key-words"),
    # conflicting values of the expected kind fail
    ("harbour/559400a63f5c/28af7bec", "fail", "conflicting-value"),  # '100 crates of linen.'
    ("harbour/559400a63f5c/2093cbb1", "fail", "conflicting-value"),  # 'Felix Dunn'
    ("harbour/ff8ce954c62c/72fcde2b", "fail", "conflicting-value"),  # '…was Felix Dunn.'
    ("uuid/5448c0124064/ba2a880f", "fail", "conflicting-value"),  # '4893f8f8-f0d1-45b1-9b21'
    # yes/no: the opening stance, or the question restated; the opposite is found, measured too little to decide
    ("limerick/124a2530c0b4/94dbee1b", "pass", "polar"),  # 'Yes, it does.'
    ("limerick/124a2530c0b4/000befc6", "undecided", "polar"),  # 'Yes, she complained.'
    ("limerick/1f35e3551721/3cee5128", "pass", "polar"),  # 'No, the Old Man of Kilkenny never had more…'
    ("limerick/1f35e3551721/515cb982", "undecided", "polar"),  # restates: complained
    # negative controls
    ("magic/7d24971e3daf/f081a738", "fail", "negative.invents-value"),  # '10000000000000000000000'
    ("uuid/970acf391a2d/67cc2687", "pass", "negative.not-found"),  # 'UNANSWERABLE'
    ("limerick/124a2530c0b4/f081a738", "fail", "negative.answers"),  # 'No, he never had more than a penny.'
]  # fmt: skip


@pytest.mark.parametrize("key, verdict, rule", BOUNDARIES)
def test_rule_boundaries_on_real_answers(key, verdict, rule):
    set_name, run, cell = key.split("/")
    rows = of("local", "local-limerick")
    (row,) = [r for r in rows if f"grading-{set_name}-" in r.id and f"/{run}/" in r.id and r.id.endswith(cell)]
    v = row.graded()
    assert (v.verdict, v.rule) == (verdict, rule), (row.answer, v.reason)
    assert verdict in ("undecided", row.label)


# -- nothing keyed on NIAN's questions, limericks or answers ----------------------------------------------------------


def _flat(text: str) -> str:
    """Lower case, words only (an apostrophe inside a word kept), single spaces."""
    return " ".join(re.sub(r"(?<!\w)'|'(?!\w)|[^\w']+", " ", text.casefold().replace("\u2019", "'")).split())


def _nian_strings() -> tuple[set[str], set[str]]:
    """What a rule keyed on NIAN's set would hold: (phrases, whole words) — its question ids, questions, limerick
    lines, expected and alternate answers, and the answers of its runs."""
    phrases: set[str] = set()
    tokens: set[str] = set()
    for q in json.loads((DATA / "nian" / "questions.json").read_text(encoding="utf-8")):
        tokens.add(str(q["id"]))
        for text in (q["question"], q["answer"], *q["alternates"], *q["limerick"].splitlines()):
            flat = _flat(text)
            (phrases if len(flat.split()) >= 3 else tokens).add(flat)
    for line in (DATA / "nian" / "answers.jsonl").read_text(encoding="utf-8").splitlines():
        for part in json.loads(line)["answer"].splitlines():
            flat = _flat(part)
            if len(flat.split()) >= 5:
                phrases.add(flat)
    return {p for p in phrases if len(p) >= 12}, {t for t in tokens if len(t) >= 4}


def _keyed(source: str, phrases: set[str], tokens: set[str]) -> list[str]:
    flat = " " + _flat(source) + " "
    return [p for p in phrases if p in flat] + [t for t in tokens if f" {t} " in flat]


def test_no_rule_names_a_question_or_quotes_an_answer_of_nians_set():
    phrases, tokens = _nian_strings()
    planted = "if answer == 'Big Lou' or question_id == 87737: pass  # What is the plight of the tree in my yard?"
    assert len(_keyed(planted, phrases, tokens)) == 3  # the check finds what it looks for
    for path in RULES:
        assert not _keyed(path.read_text(encoding="utf-8"), phrases, tokens), path.name


# -- bad input and speed --------------------------------------------------------------------------------------------

NEEDLE = "Day 13: the Fern Swift came in from Naples and landed 49 crates of slate."
QUESTION = "How many crates of slate did the Fern Swift land?"
BAD = [
    None,
    49,
    b"49 crates",
    ["49"],
    {"answer": 49},
    "",
    " \n\t ",
    "\x00\x01\ufffd",
    "49 " * 700_000,
    "no\n" * 400_000,
    '"' + "crates of slate " * 200_000 + '"',
    "Ответ: 49 ящиков — 答案是四十九 — ٤٩ crates",
    "\U0001d7d2\U0001d7d7 crates",  # mathematical bold digits
    "\u202e49 setarc",
]


@pytest.mark.parametrize("answer", BAD, ids=[repr(a)[:30] for a in BAD])
@pytest.mark.parametrize("expected", [["49"], []])
def test_bad_answers_get_a_verdict_or_undecided_never_an_exception(answer, expected):
    start = time.perf_counter()
    v = grade(answer, expected=expected, question=QUESTION, needle=NEEDLE)
    assert v.verdict in ("pass", "fail", "undecided")
    assert time.perf_counter() - start < 5  # a megabyte is not read


def test_grading_is_fast_on_the_calibration_sets():
    """`nspec.grade` takes well under 1 ms per answer on average (bench/grading.py --speed measures it); the bound
    here is loose, as the test machine is shared."""
    rows = of(*CALIBRATION)
    start = time.perf_counter()
    for row in rows:
        row.graded()
    assert (time.perf_counter() - start) / len(rows) < 0.005


# -- the written regression answers ----------------------------------------------------------------------------------


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
    assert len(rows) >= 300 and len(decided) >= 0.55 * len(rows)
    assert wrong <= 0.01 * len(decided), wrong


# -- what is left to the judges, in the plan and the report ----------------------------------------------------------


def test_plan_expects_the_judges_to_grade_what_the_calibrated_cascade_leaves():
    from nspec.runners.pipeline import plan_spec
    from nspec.spec import load_spec

    specs = HERE.parent / "specs"
    judges = plan_spec(load_spec(str(specs / "needlestack.yaml"))).plan["judges"]
    share = 1 - calibration.decided_share("free-text")  # questions about stack items: free text
    for judge in judges:
        assert judge["bound"] == "at most" and judge["expected"]["share"] == round(share, 4)
        assert judge["expected"]["requests"] == round(share * judge["requests"])
        assert judge["expected"]["cost_usd"] < judge["cost_usd"]
    always = plan_spec(load_spec(str(specs / "kamradt-classic.yaml"))).plan["judges"]
    assert always and all(j["bound"] == "exact" and "expected" not in j for j in always)  # `when: always`
