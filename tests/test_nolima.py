"""The `nolima` family: latent needle-question pairs (NoLiMa's needle-set format, nspec's own set by default), the
answer a character's name found once in the prompt, only in the needle; its data files and its latency checked by
validate, plan and compile alike. (A run through the emulator and its report: `tests/test_context_rot.py`, whose
family is this one with more factors.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nspec.compiler.tasks import nolima

SPEC = """\
nspec: 1
name: latent
seed: 5
haystack: {corpus: austen}
task: {name: nolima, params: {questions: [onehop, twohop], latent: true, pairs_per_trial: 3}}
grid: {context_lengths: [600, 1200], depths: [10, 90]}
prompt: {user: "{haystack}\\n\\nQuestion: {question}", reserve_tokens: 40}
models: [{id: openai/gpt-4.1-mini}, {id: anthropic/claude-haiku-4-5}]
"""


def compiled(cli, name, out):
    result = cli("compile", name, "-o", str(out))
    assert result.code == 0, result.err
    run = Path(result.out.strip().splitlines()[-1])
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    requests = {}
    for shard in sorted((run / "answers" / "requests").iterdir()):
        for line in shard.read_text().splitlines():
            request = json.loads(line)
            requests[request["custom_id"]] = request
    return run, cells, requests


def user_text(request):
    body = request.get("body") or request["params"]
    return (
        body["messages"][-1]["content"]
        if isinstance(body["messages"][-1]["content"], str)
        else "".join(part["text"] for part in body["messages"][-1]["content"])
    )


def test_the_answer_is_in_the_prompt_once_in_the_needle_of_a_latent_pair(cli, spec_file, tmp_path):
    run, cells, requests = compiled(cli, spec_file(SPEC), tmp_path / "out")
    assert len(cells) == 2 * 2 * 2 * 3  # models x lengths x depths x pairs
    pairs = {p.id: p for p in nolima.asked(nolima._built_in()[0], {})}
    for cell in cells:
        (answer,) = cell["expected"]
        (needle,) = cell["needles"]
        text = user_text(requests[cell["cell_id"]])
        assert text.count(answer) == 1 and needle["text"] in text and answer in needle["text"]
        pair = pairs[cell["data"]["pair"]]
        assert needle["text"] == pair.needle.replace("{CHAR}", answer) and cell["question"] == pair.question
        assert text.endswith(f"Question: {pair.question}")
        assert not nolima.shared_words(pair) and cell["axes"] == {"question": pair.kind}
        assert cell["context_length"]["actual"] <= cell["context_length"]["target"]
        assert abs(needle["depth_actual"] - cell["depth"]["requested"]) <= 10
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["task"]["name"] == "nolima" and manifest["task"]["axes"] == ["depth", "question"]


def test_a_name_the_haystack_holds_is_never_drawn_and_said(cli, spec_file, tmp_path):
    (tmp_path / "book.txt").write_text("Ravi came home. " * 200 + "Yuki and Ingrid went out.\n", encoding="utf-8")
    spec = SPEC.replace("{corpus: austen}", "{files: book.txt}").replace("anthropic/claude-haiku-4-5", "openai/gpt-4.1")
    _, cells, requests = compiled(cli, spec_file(spec), tmp_path / "out")
    for cell in cells:
        assert cell["data"]["excluded_characters"] == ["Ingrid", "Ravi", "Yuki"]
        assert cell["expected"][0] not in ("Ingrid", "Ravi", "Yuki")
        assert user_text(requests[cell["cell_id"]]).count(cell["expected"][0]) == 1
    names = " ".join(json.loads((Path(nolima.__file__).parent / "latent_pairs.json").read_text())[0]["character_set"])
    (tmp_path / "book.txt").write_text(f"{names}.\n" * 200, encoding="utf-8")
    result = cli("compile", "spec.yaml", "-o", str(tmp_path / "again"))
    assert result.code == 2 and "character name(s) that the haystack and prompts do not hold" in result.err


# NoLiMa's needle-set format as its repository publishes it (fields it has that nspec reads past included); the
# texts are made up for the test.
NOLIMA_SET = [
    {
        "id": "0101",
        "reasoning_type": "world_knowledge",
        "system_prompt": "You are a helpful assistant",
        "task_template": "{haystack} {question}",
        "needle": "Actually, {CHAR} swam beside {1} last year.",
        "questions": {"onehop": "Which character has been to {2}?", "twohop": "Which character has been to {3}?"},
        "character_set": ["Oskar", "Priya", "Wen"],
        "distractors": {"onehop": "There was a picture of {2} on the wall."},
        "tests": {"T01": {"input_args": ["the Great Barrier Reef", "Queensland", "Australia"]}},
    }
]


def test_a_needle_set_in_nolima_s_format_is_read(cli, spec_file, tmp_path):
    (tmp_path / "set.json").write_text(json.dumps(NOLIMA_SET), encoding="utf-8")
    spec = SPEC.replace("questions: [onehop, twohop], latent: true, pairs_per_trial: 3", "needle_set: set.json")
    spec = spec.replace(", {id: anthropic/claude-haiku-4-5}", "")
    first, cells, _ = compiled(cli, spec_file(spec), tmp_path / "out")
    assert {c["question"] for c in cells} == {
        "Which character has been to Queensland?",
        "Which character has been to Australia?",
    }
    for cell in cells:
        (answer,) = cell["expected"]
        assert answer in NOLIMA_SET[0]["character_set"]
        assert cell["data"]["needle"] == f"Actually, {answer} swam beside the Great Barrier Reef last year."
    changed = [{**NOLIMA_SET[0], "character_set": ["Oskar", "Priya"]}]
    (tmp_path / "set.json").write_text(json.dumps(changed), encoding="utf-8")
    run, _, _ = compiled(cli, "spec.yaml", tmp_path / "out")
    assert run != first  # the set read enters the compile hash


@pytest.mark.parametrize(
    "change, file, error",
    [
        (
            ("questions: [onehop, twohop]", "questions: [onehop, literal]"),
            None,
            "spec.yaml:5:69: task.params.latent: pair 0001/T01/literal is not latent: its needle and question share "
            "bridge, live, rialto, short, walk",
        ),
        (("questions: [onehop, twohop]", "questions: [threehop]"), None, "task.params.questions: no question kind"),
        (
            ("latent: true", "needle_set: set.json"),
            {"id": "0101"},
            "spec.yaml:5:72: task.params.needle_set: set.json: top level: not a non-empty list",
        ),
        (
            ("latent: true", "needle_set: set.json"),
            [{**NOLIMA_SET[0], "tests": {"T01": {"input_args": ["reef"]}}}],
            "task.params.needle_set: set.json: [0].tests.T01.input_args: not a list of at least 3 strings",
        ),
        (("latent: true", "needle_set: none.json"), None, "task.params.needle_set: none.json does not exist"),
        (("questions: [onehop, twohop]", "question: [onehop]"), None, "task.params.question: unknown key"),
        (("name: nolima", "name: nolma"), None, "task.name: unknown task family 'nolma'"),
        (
            ("{corpus: austen}", "{stack: {items: i.jsonl, questions: q.jsonl}}"),
            None,
            "task: the nolima task family reads a text haystack (corpus, files or noise), not a `stack`",
        ),
    ],
)
def test_bad_pairs_and_parameters_are_located_in_validate_plan_and_compile(
    cli, spec_file, tmp_path, change, file, error
):
    if file is not None:
        (tmp_path / "set.json").write_text(json.dumps(file), encoding="utf-8")
    name = spec_file(SPEC.replace(*change))
    for command in (["validate"], ["plan"], ["compile", "-o", "out"]):
        result = cli(*command, name)
        assert result.code == 2 and error in result.err, (command, result.err)
