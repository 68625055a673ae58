"""Audit tools on a compiled run with hand-written results and scores, so every figure is known."""

import json

from nspec.runners.grading.audit import answers_by_question, dissent, variance
from nspec.runners.run_store import Run
from tests.test_compile import SMALL, compile_spec, read_jsonl


def scored_run(spec_file, tmp_path):
    run = compile_spec(spec_file(SMALL), tmp_path / "out").path
    cells = [c for c in read_jsonl(run / "cells.jsonl") if c["model"] == "openai/gpt-4.1-mini"]
    results, scores = [], []
    for i, cell in enumerate(cells):
        wrong = cell["trial"] == 1 and cell["context_length"]["target"] == 900 and cell["depth"]["requested"] == 40
        text = "I cannot say." if wrong else f"It is {cell['expected'][0] if cell['expected'] else 'not found'}."
        results.append(
            {
                "cell_id": cell["cell_id"],
                "stage": "answers",
                "model": cell["model"],
                "status": "ok",
                "text": text,
                "usage": {"input_tokens": 100, "output_tokens": 5},
                "source": {"kind": "batch"},
            }
        )
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
    wrong = [e for e in data if e["failing"]]
    assert len(wrong) == 1 and wrong[0]["failing"] == {"I cannot say.": 1} and not wrong[0]["passing"]
    # Grouped by question and expected answer: every needle cell drew its own number.
    cells = [c for c in read_jsonl(run / "cells.jsonl") if c["model"] == "openai/gpt-4.1-mini" and not c["negative"]]
    assert len(data) == len({(c["question"], tuple(c["expected"])) for c in cells}) == len(cells)
    place = {(c["trial"], c["context_length"]["target"], c["depth"]["requested"]): c for c in cells}
    assert wrong[0]["expected"] == place[(1, 900, 40)]["expected"]
    result = cli("answers", str(run))
    assert result.code == 0 and "1 distinct failing answers" in result.out
    assert json.loads((run / "answers" / "by-question.json").read_text()) == data


def test_audit_commands(spec_file, tmp_path, cli):
    run, _ = scored_run(spec_file, tmp_path)
    assert "50%" in cli("dissent", str(run)).out
    assert json.loads(cli("variance", str(run), "--json").out)[0]["fails"] == 1


STACK_SPEC = """\
nspec: 1
name: stack
haystack: {stack: {items: items.jsonl, questions: questions.jsonl}, separator: "\\n"}
grid: {context_lengths: [1000], depths: [50]}
prompt: {user: "{haystack}\\n{question}"}
models: [{id: openai/gpt-4.1-mini}]
"""


def test_questions_from_stdin(spec_file, tmp_path):
    import subprocess
    import sys

    items = [{"id": f"i{n}", "text": f"Day {n}: the boat brought {n} crates."} for n in range(1, 6)]
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    (tmp_path / "questions.jsonl").write_text(json.dumps({"item": "i1", "question": "Q?", "answer": "1"}) + "\n")
    spec = spec_file(STACK_SPEC)
    typed = "How many crates came on that day?\n3\n\nWhich day was it?\n4\n"
    proc = subprocess.run(
        [sys.executable, "-m", "nspec", "questions", spec, "--count", "3"],
        input=typed,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 questions added to" in proc.stdout and "question (empty to skip): " in proc.stdout
    lines = [json.loads(line) for line in (tmp_path / "questions.jsonl").read_text().splitlines()]
    assert len(lines) == 3 and lines[0]["item"] == "i1"  # the existing line is kept
    assert [q["question"] for q in lines[1:]] == ["How many crates came on that day?", "Which day was it?"]
    assert all(q["item"] != "i1" for q in lines[1:])  # items already asked about are not shown again
    shown = [ln.strip("[]") for ln in proc.stdout.splitlines() if ln.startswith("[i")]
    assert [q["item"] for q in lines[1:]] == [shown[0], shown[2]]  # the second item was skipped


def test_questions_needs_a_stack(spec_file, cli):
    from tests.conftest import BASE

    result = cli("questions", spec_file(BASE))
    assert result.code == 2 and "has no stack haystack" in result.err
