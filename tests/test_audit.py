"""Audit tools on a compiled run with hand-written results and scores, so every figure is known."""

import json

from nspec.runners.audit import answers_by_question, dissent, variance
from nspec.runners.rundir import Run
from tests.test_compile import SMALL, compile_spec, read_jsonl


def scored_run(spec_file, tmp_path):
    run = compile_spec(spec_file(SMALL), tmp_path / "out").path
    cells = [c for c in read_jsonl(run / "cells.jsonl") if c["model"] == "openai/gpt-4.1-mini"]
    results, scores = [], []
    for i, cell in enumerate(cells):
        wrong = cell["trial"] == 1 and cell["context_length"]["target"] == 900 and cell["depth"]["requested"] == 40
        text = "I cannot say." if wrong else f"It is {cell['expected'][0] if cell['expected'] else 'not found'}."
        results.append({"cell_id": cell["cell_id"], "status": "ok", "text": text})
        verdict = "fail" if wrong else "pass"
        # Judges A and B always vote with the panel; C votes against it on every other cell.
        votes = [
            {"judge": "A", "vote": verdict},
            {"judge": "B", "vote": verdict},
            {"judge": "C", "vote": verdict if i % 2 else ("fail" if verdict == "pass" else "pass")},
        ]
        scorer = {"scorer": "contains", "verdict": verdict if i % 4 == 0 else "undecided", "reason": "", "score": None}
        scores.append(
            {
                "cell_id": cell["cell_id"],
                "model": cell["model"],
                "prompt": None,
                "negative": cell["negative"],
                "scorers": [scorer],
                "votes": votes,
                "judge_verdict": verdict,
                "verdict": verdict,
                "score": 1.0 if verdict == "pass" else 0.0,
            }
        )
    (run / "answers" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    (run / "scores.jsonl").write_text("".join(json.dumps(s) + "\n" for s in scores))
    return run, cells


def test_dissent(spec_file, tmp_path):
    run, cells = scored_run(spec_file, tmp_path)
    rows = {r["judge"]: r for r in dissent(Run(run))}
    assert rows["A"]["dissent_from_majority"] == 0.0 and rows["B"]["dissent_from_majority"] == 0.0
    assert rows["C"]["dissent_from_majority"] == 0.5 and rows["C"]["votes"] == len(cells)
    assert rows["C"]["compared_with_scorers"] == len(range(0, len(cells), 4))
    assert rows["C"]["disagrees_with_scorers"] == 1.0  # every 4th cell is also even: C always against


def test_variance_lists_the_cell_whose_trials_disagree(spec_file, tmp_path):
    run, _ = scored_run(spec_file, tmp_path)
    (row,) = variance(Run(run))
    assert (row["context_length"], row["depth"], row["passes"], row["fails"]) == (900, 40.0, 1, 1)


def test_answers_by_question(spec_file, tmp_path, cli):
    run, _ = scored_run(spec_file, tmp_path)
    data = answers_by_question(Run(run))
    wrong = [q for q, e in data.items() if e["failing"]]
    assert len(wrong) == 1 and data[wrong[0]]["failing"] == {"I cannot say.": 1}
    result = cli("answers", str(run))
    assert result.code == 0 and "1 distinct failing answers" in result.out
    assert json.loads((run / "answers" / "by-question.json").read_text()) == data


def test_audit_commands(spec_file, tmp_path, cli):
    run, _ = scored_run(spec_file, tmp_path)
    assert "50%" in cli("dissent", str(run)).out
    assert json.loads(cli("variance", str(run), "--json").out)[0]["fails"] == 1
