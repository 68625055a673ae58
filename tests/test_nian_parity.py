"""specs/nian.yaml reads NIAN's own files and builds NIAN's prompt. NIAN's rule — `build_text_from_limerick_list`
of prompt.py with its INTRO_TO_PROMPT, then test_results.py appending the question (llmonpy/needle-in-a-needlestack
at commit eafb9b3fb01fb9b80569df52e75f1aa0196ee21f) — is re-implemented here and run on the limericks nspec chose, in
its order, with the location where nspec put the question's limerick; its text must be the compiled user message.
The files are small ones of our own in NIAN's formats (the OEDILF limericks are not ours to ship)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nspec.compiler.run_writer import compile_run
from nspec.spec import load_spec
from tests.conftest import SPECS

INTRO_TO_PROMPT = (  # prompt.py
    "This is a test to see how well you are paying attention. This text is a series of limericks. "
    "At the end of the list of limericks, there will be a question. The question will be about one of the limericks. "
    "Please answer the question as concisely as possible. "
)
SYSTEM_PROMPT = (  # test_results.py
    "You are an expert at understanding limericks and answering questions based on the limericks you read."
)
AVERAGE_TEXT_TO_GPT4_TOKEN_RATIO = 1.4813021426742123  # limerick.py
OPENINGS = ['"Said the king', "#9 on my list", "- a dash", "There once was a crab", "\u2014And a dash", "'Twas a day"]


def limerick(i: int) -> str:
    first = OPENINGS[i % len(OPENINGS)]
    return (
        f"{first} from port {i},\nWho sailed with a cargo of tin.\nHe sold it for gold,\nOr so I am told,\n"
        f"And {i} crates came back in."
    )


def build_text_from_limerick_list(intro, limericks, question_text, location, max_size, repeat_question_count=1):
    """prompt.py's LimerickPrompt.build_text_from_limerick_list, line for line (token counts as NIAN estimates them)."""
    count = lambda text: len(text.split()) * AVERAGE_TEXT_TO_GPT4_TOKEN_RATIO  # noqa: E731 (limerick.py)
    last_token_count = current_token_count = 0
    result = intro + "\n\n"
    added_question = False
    for text in limericks:
        current_token_count += count(text)
        if current_token_count > max_size:
            break
        if last_token_count < location <= current_token_count:
            for _ in range(repeat_question_count):
                result += "\n\n" + question_text
                current_token_count += count(question_text)
            added_question = True
        result += "\n\n" + text
        last_token_count = current_token_count
    assert added_question
    return result


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], dict[str, dict], dict[str, dict]]:
    folder = tmp_path_factory.mktemp("nian")
    data = folder / "data" / "nian"
    data.mkdir(parents=True)
    dataset = [{"id": 1000 + i, "author": "An Author", "limerick": limerick(i)} for i in range(160)]
    (data / "limerick_dataset_oedilf_v3.json").write_text(json.dumps(dataset, indent=4))
    questions = [
        {"id": 1003, "author": "An Author", "text": limerick(3), "question": "How many crates came back in?",
         "answer": "3", "alternate_answers": ["three crates", "3 crates"], "token_count": 40},
        {"id": 5000, "author": "Another", "text": "\u201cA quote\u201d, said the cook,\nAs she read from her book.",
         "question": "What did the cook read from?", "answer": "her book", "alternate_answers": None},
    ]  # fmt: skip
    (data / "full_questions.json").write_text(json.dumps(questions, indent=4))
    text = (SPECS / "nian.yaml").read_text().replace('"data:nian/', '"data/nian/')  # the files of this test
    grid = text[text.index("grid:") : text.index("prompt:")]
    small = "grid: {context_lengths: [1200, 2500], depths: [1, 50, 98], repeats: [1, 3]}\n"
    (folder / "nian.yaml").write_text(text.replace(grid, small))
    loaded = load_spec(str(folder / "nian.yaml"))
    run = Path(compile_run(loaded.data, loaded.base_dir, folder / "out", {}).path)
    requests = {}
    for shard in (run / "answers" / "requests").iterdir():
        for line in map(json.loads, shard.read_text().splitlines()):
            requests[line["custom_id"]] = line
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    return cells, requests, {str(q["id"]): q for q in questions}


def test_the_prompt_is_nians(compiled):
    cells, requests, questions = compiled
    checked = 0
    for cell in cells:
        if cell["model"] != "openai/gpt-4o-mini":
            continue
        question = questions[cell["item"]]
        messages = requests[cell["cell_id"]]["body"]["messages"]
        assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
        user = messages[1]["content"]
        assert user.startswith(INTRO_TO_PROMPT + "\n\n\n\n") and user.endswith("\n\n" + question["question"])
        stack = user[len(INTRO_TO_PROMPT) + 4 : -len("\n\n" + question["question"])].split("\n\n")
        block = stack.index(question["text"])
        assert stack[block : block + cell["repeat"]] == [question["text"]] * cell["repeat"]
        filler = stack[:block] + stack[block + cell["repeat"] :]
        assert question["text"] not in filler and len(filler) > 3
        # NIAN puts the question's limerick before the first limerick whose running count reaches the location
        location = sum(len(t.split()) * AVERAGE_TEXT_TO_GPT4_TOKEN_RATIO for t in filler[: block + 1])
        nian = build_text_from_limerick_list(
            INTRO_TO_PROMPT, filler, question["text"], location, 10**9, cell["repeat"]
        ) + "\n\n" + question["question"]  # fmt: skip
        assert user == nian
        assert cell["expected"] == [question["answer"]]
        assert cell["alternates"] == (question["alternate_answers"] or [])
        checked += 1
    assert checked == 2 * 3 * 2 * 2  # lengths x locations x repeats x questions


def test_every_limerick_opening_is_used(compiled):
    """Limericks that open with a quote, '#', '-' or a dash fill the stack like any other."""
    cells, requests, _ = compiled
    users = "".join(
        requests[c["cell_id"]]["body"]["messages"][1]["content"] for c in cells if "body" in requests[c["cell_id"]]
    )
    for opening in OPENINGS:
        assert "\n\n" + opening in users, opening


def test_the_judges_are_five_on_nians_prompt_by_majority():
    loaded = load_spec(str(SPECS / "nian.yaml"))  # on the stand-ins of NIAN's files in the tests' cache
    judge = loaded.data["scoring"][0]["judge"]
    assert judge["prompt"] == "nian" and judge["vote"] == "majority" and len(judge["models"]) == 5


def test_missing_files_say_the_command_that_fetches_them(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("NSPEC_CACHE_DIR", str(tmp_path / "empty"))
    monkeypatch.chdir(SPECS.parent)
    for command in ("validate", "plan"):
        result = cli(command, "specs/nian.yaml")
        assert result.code == 2
        assert (
            "specs/nian.yaml:14:12: haystack.stack.items: data:nian/limerick_dataset_oedilf_v3.json (Needle in a "
            "Needlestack's limericks, the OEDILF's, and its vetted questions) is not in nspec's cache yet; fetch it "
            "with: nspec data fetch nian"
        ) in result.err
