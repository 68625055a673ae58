"""The default cascade measured on the labelled set (tests/grading/labelled.yaml): how many answers it decides, and
how often a decision agrees with the label. A change that makes it confidently wrong more often than a single good
judge (about 3% of the time), or that leaves much more to judges, fails here."""

from pathlib import Path

from ruamel.yaml import YAML

from nspec import grade

LABELLED = Path(__file__).parent / "grading" / "labelled.yaml"


def graded():
    for item in YAML(typ="safe").load(LABELLED.read_text(encoding="utf-8")):
        accepted = item["expected"] + item.get("alternates", [])
        for label, answer in item["answers"]:
            verdict = grade(
                answer,
                expected=accepted,
                question=item["question"],
                needle=item.get("needle"),
                require=item.get("require", "any"),
            )
            yield label, verdict, answer


def test_the_cascade_decides_most_answers_and_is_right_when_it_does():
    rows = list(graded())
    decided = [(label, v, answer) for label, v, answer in rows if v.verdict != "undecided"]
    wrong = [(label, v.verdict, v.reason, answer) for label, v, answer in decided if v.verdict != label]
    agreement = 1 - len(wrong) / len(decided)
    print(f"\n{len(rows)} labelled answers; decided {len(decided) / len(rows):.1%}; agreement {agreement:.1%}")
    assert len(rows) >= 300
    assert len(decided) / len(rows) >= 0.80
    assert agreement >= 0.97, wrong


def test_every_label_is_pass_or_fail_and_both_occur():
    labels = [label for label, _, _ in graded()]
    assert set(labels) == {"pass", "fail"}
    assert 0.3 < labels.count("pass") / len(labels) < 0.7
