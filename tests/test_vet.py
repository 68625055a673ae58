"""nspec vet against the emulator: questions a model fails with only the needle, and questions it answers from
memory (closed book), are flagged."""

import json

import pytest

from nspec.runners.emulator.config import Responder

pytestmark = pytest.mark.usefixtures("api_keys")

SPEC = """\
nspec: 1
name: vet-test
haystack: {{stack: {{items: items.jsonl, questions: questions.jsonl}}, separator: "\\n"}}
grid: {{context_lengths: [1000], depths: [50]}}
prompt: {{user: "{{haystack}}\\n{{question}}", reserve_tokens: 50}}
models:
  - {{id: openai/gpt-4.1-mini, base_url: "{openai}"}}
  - {{id: anthropic/claude-haiku-4-5, base_url: "{anthropic}"}}
scoring:
  - number: true
"""


def write_stack(tmp_path, emu):
    items = [
        {"id": "i1", "text": "Day 3: the Fern Swift came in from Porto and landed 10 crates of figs."},
        {"id": "i2", "text": "Day 5: the Opal Shrike came in from Riga and landed 44 crates of tin."},
        {"id": "i3", "text": "Day 8: the Moss Grebe came in from Genoa and landed 7 crates of salt."},
    ]
    questions = [
        {"item": "i1", "question": "How many crates of figs did the Fern Swift land?", "answer": "10"},
        # a broken question: its answer is not what the item says
        {"item": "i2", "question": "How many crates of tin did the Opal Shrike land?", "answer": "45"},
    ]
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(openai=emu.openai_base_url, anthropic=emu.anthropic_base_url))
    return str(spec)


def test_vet_flags_the_question_models_fail_with_only_the_item(emulator, tmp_path, cli):
    emu = emulator()
    spec = write_stack(tmp_path, emu)
    result = cli("vet", spec, "--trials", "3", "--json")
    assert result.code == 4  # something is flagged
    rows = json.loads(result.out)
    assert len(rows) == 4 and all(r["asked"] == 3 for r in rows)
    flagged = {(r["model"], r["key"]) for r in rows if r["flagged"]}
    assert flagged == {("openai/gpt-4.1-mini", "i2"), ("anthropic/claude-haiku-4-5", "i2")}
    assert emu.emulation.statuses[200] == 12  # 2 models x 2 questions x 3 trials, live


def test_closed_book(emulator, tmp_path, cli):
    oracle = emulator()
    result = cli("vet", write_stack(tmp_path, oracle), "--trials", "2", "--closed-book")
    assert result.code == 0 and "no question flagged" in result.out  # without the item, nothing is known
    echo = emulator(responder=Responder(kind="echo"))
    spec = write_stack(tmp_path, echo)
    giveaway = {"item": "i1", "question": "The Fern Swift landed 10 crates of figs: how many crates?", "answer": "10"}
    (tmp_path / "questions.jsonl").write_text(json.dumps(giveaway) + "\n")
    result = cli("vet", spec, "--trials", "1", "--closed-book")
    assert result.code == 4 and "1 question(s) flagged: a model answers them from memory" in result.out


def test_vet_text_needles(emulator, tmp_path, cli):
    emu = emulator()
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""\
nspec: 1
name: vet-needles
haystack: {{corpus: austen}}
needles:
  - text: "The special magic {{city}} number is: {{number}}."
    question: "What is the special magic {{city}} number?"
    answer: "{{number}}"
    vars: {{city: {{choice: cities}}, number: {{digits: 7}}}}
grid: {{context_lengths: [1000], depths: [50]}}
prompt: {{user: "{{haystack}}\\n\\n{{question}}", reserve_tokens: 50}}
models: [{{id: openai/gpt-4.1-mini, base_url: "{emu.openai_base_url}"}}]
""")
    result = cli("vet", str(spec), "--trials", "2", "--json")
    assert result.code == 0
    (row,) = json.loads(result.out)
    assert (row["passed"], row["asked"], row["flagged"]) == (2, 2, False)


def test_vet_grades_with_the_spec_judges(emulator, tmp_path, cli):
    """A spec that leaves grading to judges: vet asks them, rather than counting every answer as undecided."""
    emu = emulator()
    spec = write_stack(tmp_path, emu)
    judges = f'  - judge:\n      models: [{{id: openai/gpt-4.1-mini, mode: live, base_url: "{emu.openai_base_url}"}}]\n'
    path = tmp_path / "spec.yaml"
    path.write_text(path.read_text().replace("  - number: true\n", judges))
    result = cli("vet", spec, "--trials", "2", "--json")
    rows = json.loads(result.out)
    assert result.code == 4
    flagged = {(r["model"], r["key"]) for r in rows if r["flagged"]}
    assert flagged == {("openai/gpt-4.1-mini", "i2"), ("anthropic/claude-haiku-4-5", "i2")}  # not every question
    assert all(r["undecided"] == 0 for r in rows)
    # 2 models x 2 questions x 2 trials answered, and as many judge calls: every oracle answer is a sentence
    assert emu.emulation.statuses[200] == 16


def test_vet_refuses_judges_that_give_scores_only(emulator, tmp_path, cli):
    """Score-10 judges without a threshold give no verdict: nothing could pass, so vet refuses before asking."""
    emu = emulator()
    spec = write_stack(tmp_path, emu)
    judges = f'  - judge:\n      models: [{{id: openai/gpt-4.1-mini, base_url: "{emu.openai_base_url}"}}]\n'
    path = tmp_path / "spec.yaml"
    path.write_text(path.read_text().replace("  - number: true\n", judges + "      rubric: score-10\n"))
    result = cli("vet", spec)
    assert result.code == 2 and "give the judge entry a `threshold`" in result.err, result.err
    assert emu.emulation.statuses[200] == 0
