"""A scorer of one's own, installed as its own distribution with a metric of its own, exactly as nspec's built-in
scorers are: a spec names it, `validate` checks the spec's options against the scorer's schema (located as the spec's
own errors are), editors get its options from `nspec schema --print`, `nspec score` grades with it, and the report
aggregates its scores by its metric's declaration, under its metric's label."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from nspec.runners import pipeline
from nspec.runners.report import build_report
from nspec.runners.report.data import collect
from nspec.runners.run_store import Run
from tests.distributions import install, reload_plugins
from tests.families import families  # noqa: F401 - a fixture

# The share of the expected answer's words the answer holds; its metric is the worst score, not the mean.
MODULE = """
from nspec.scorers import Metric, Scorer, Verdict


class WordRecall(Scorer):
    name = "word_recall"
    metric = "worst"
    options_schema = {
        "description": "The share of the expected answer's words the answer holds; a pass from `threshold` on.",
        "oneOf": [
            {"const": True},
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "threshold": {
                        "description": "The share that passes.",
                        "type": "number",
                        "minimum": 0,
                        "maximum": 1,
                        "default": 1,
                    }
                },
            },
        ],
    }

    def grade(self, answer, inp, options):
        wanted = inp.expected[0].lower().split()
        said = set(answer.lower().replace(".", " ").split())
        share = sum(word in said for word in wanted) / len(wanted)
        threshold = options.get("threshold", 1) if isinstance(options, dict) else 1
        return Verdict("pass" if share >= threshold else "fail", self.name, f"{share:.0%} of its words", share)


class Worst(Metric):
    name = "worst"
    label = "worst case"
    percent = True

    def start(self):
        return Lowest()


class Lowest:
    def __init__(self):
        self.low = None

    def add(self, score):
        self.low = score if self.low is None else min(self.low, score)

    def result(self):
        return self.low


WORD_RECALL = WordRecall()
WORST = Worst()
"""

SPEC = """\
nspec: 1
name: count
seed: 3
task: {name: counting, params: {word: fig}}
grid: {context_lengths: [300, 700], params: {vocabulary: [3, 5]}, trials: 2}
prompt: {system: "Answer with a number.", reserve_tokens: 20}
models: [{id: openai/gpt-4.1-mini}]
scoring:
  - word_recall: {threshold: 0.5}
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    points = {"nspec.scorers": {"word_recall": "recall:WORD_RECALL"}, "nspec.metrics": {"worst": "recall:WORST"}}
    install(tmp_path / "site", monkeypatch, "word-recall", {"recall": MODULE}, points)
    yield
    monkeypatch.undo()
    reload_plugins()


pytestmark = pytest.mark.usefixtures("families", "plugin")


def test_its_options_are_validated_by_its_own_schema_located_in_the_spec(cli, spec_file):
    assert cli("validate", spec_file(SPEC)).code == 0
    result = cli("validate", spec_file(SPEC.replace("{threshold: 0.5}", "{threshold: 2, cutoff: 1}")))
    assert result.code == 2
    assert result.lines[:2] == [
        "spec.yaml:9:30: scoring[0].word_recall.threshold: must be at most 1 (got 2)",
        "spec.yaml:9:33: scoring[0].word_recall.cutoff: unknown key 'cutoff'; allowed keys: threshold",
    ]
    result = cli("validate", spec_file(SPEC.replace("{threshold: 0.5}", "yes please")))
    assert result.code == 2
    assert "spec.yaml:9:18: scoring[0].word_recall: must be true or a mapping (key: value)" in result.err


def test_editors_get_its_options_from_the_schema_nspec_prints(cli, tmp_path):
    printed = cli("schema", "--print")
    assert printed.code == 0, printed.err
    scorer = json.loads(printed.out)["$defs"]["scorer"]
    assert scorer["properties"]["word_recall"]["oneOf"][1]["properties"]["threshold"]["maximum"] == 1
    assert cli("schema", "--write", str(tmp_path / "spec.json")).code == 0
    assert (tmp_path / "spec.json").read_text() == printed.out


def test_it_grades_a_run_and_the_report_aggregates_by_its_metric(cli, spec_file, tmp_path):
    result = cli("compile", spec_file(SPEC.replace("{threshold: 0.5}", "{}")), "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    run = Path(result.out.strip().splitlines()[-1])
    assert "threshold: 1" in (run / "spec.yaml").read_text()  # its option's default, from its schema
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    results = []
    for cell in cells:  # every answer right, but the second trial's at the longer length
        wrong = cell["trial"] == 1 and cell["context_length"]["target"] == 700
        text = f"It occurs {int(cell['expected'][0]) + 1 if wrong else cell['expected'][0]} times."
        results.append(
            {
                "cell_id": cell["cell_id"],
                "stage": "answers",
                "model": cell["model"],
                "status": "ok",
                "text": text,
                "usage": {"input_tokens": 10, "output_tokens": 3},
                "source": {"kind": "batch"},
            }
        )
    (run / "answers" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    pipeline.score(run)
    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    assert {s["scorers"][0]["scorer"] for s in scores} == {"word_recall"}
    assert sorted(s["score"] for s in scores) == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    data = collect([Run(run)])
    assert data.metric.label == "worst case"
    assert data.model_scores == {"openai/gpt-4.1-mini": 0.0}  # the worst cell, not the mean (0.75)
    worst = {(r["context_length"], r["value"]): r["score"] for r in data.values if r["axis"] == "vocabulary"}
    assert worst == {(300, "3"): 1.0, (300, "5"): 1.0, (700, "3"): 0.0, (700, "5"): 0.0}
    page = build_report([Run(run)]).read_text()
    assert "<th>Worst case</th>" in page and "<td>0.0%</td>" in page  # the summary's score column
    assert "effective length 300 (worst case x 100)" in page  # the table of each axis
    assert "<td>100.0</td><td>0.0</td><td>50.0</td><td>75%</td>" in page  # by length, its average, the pass rate
