"""specs/kamradt-classic.yaml builds what needlehaystack builds. The reference's rule — `read_context_files`,
`encode_and_trim` and `insert_needle` of needlehaystack/llm_needle_haystack_tester.py, and `generate_prompt` of its
providers/openai.py and providers/Anthropic_prompt.txt (gkamradt/LLMTest_NeedleInAHaystack at commit
7b90d285651b68d39a94f3d3bd3672f84192c989) — is re-implemented here with tiktoken's cl100k_base on a small text of our
own, and compared with the requests nspec compiles from the shipped spec's settings for the same lengths and depths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nspec.compiler.grid import depths
from nspec.compiler.run_writer import compile_run
from nspec.compiler.tokenizers import encoding
from nspec.spec import load_spec
from tests.conftest import SPECS

WORDS = ["harbour", "lantern", "orchard", "granite", "meadow", "copper", "violin", "saddle", "thimble", "glacier"]


def essay(seed: int, sentences: int) -> str:
    """Prose of our own: sentences ending in periods, question marks and exclamations, some paragraphs apart."""
    out = []
    for i in range(sentences):
        words = [WORDS[(seed * 7 + i * 3 + j) % len(WORDS)] for j in range(5 + (i * seed) % 9)]
        end = "?" if i % 7 == 3 else "!" if i % 11 == 5 else "."
        out.append(" ".join(words).capitalize() + end + ("\n\n" if i % 6 == 5 else " "))
    return "".join(out)


ESSAYS = {"a.txt": essay(1, 120), "b.txt": essay(2, 90), "c.txt": essay(3, 150)}
LENGTHS = [700, 1600, 3400]
DEPTHS = depths({"from": 0, "to": 100, "steps": 15, "spacing": "sigmoid"})  # the spec's 15, to 3 decimals


def reference_context(files: list[str], needle: str, context_length: int, depth_percent: float, buffer: int) -> str:
    """needlehaystack's generate_context, line for line (its files in glob order: here, the order given)."""
    enc = encoding("cl100k_base").encoding
    context = ""
    while len(enc.encode(context)) < max(LENGTHS):  # read_context_files
        for text in files:
            context += text
    tokens = enc.encode(context)  # encode_and_trim
    if len(tokens) > context_length:
        context = enc.decode(tokens[:context_length])
    tokens_needle = enc.encode(needle)  # insert_needle
    tokens_context = enc.encode(context)
    context_length -= buffer
    if len(tokens_context) + len(tokens_needle) > context_length:
        tokens_context = tokens_context[: context_length - len(tokens_needle)]
    if depth_percent == 100:
        tokens_new_context = tokens_context + tokens_needle
    else:
        insertion_point = int(len(tokens_context) * (depth_percent / 100))
        tokens_new_context = tokens_context[:insertion_point]
        period_tokens = enc.encode(".")
        while tokens_new_context and tokens_new_context[-1] not in period_tokens:
            insertion_point -= 1
            tokens_new_context = tokens_context[:insertion_point]
        tokens_new_context += tokens_needle + tokens_context[insertion_point:]
    return enc.decode(tokens_new_context)


# providers/openai.py, generate_prompt
OPENAI_SYSTEM = "You are a helpful AI bot that answers questions for a user. Keep your response short and direct"
OPENAI_SUFFIX = " Don't give information outside the document or repeat your findings"
# providers/Anthropic_prompt.txt
ANTHROPIC_PROMPT = (
    "You are a helpful AI bot that answers questions for a user. Keep your response short and direct\n\n"
    "Human: <context>\n{context}\n</context>\n\n"
    "{retrieval_question} Don't give information outside the document or repeat your findings\n\n"
    "Assistant: Here is the most relevant sentence in the context:"
)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[dict], dict[str, dict]]:
    """The shipped spec with its haystack swapped for our essays and its grid for a small one."""
    folder = tmp_path_factory.mktemp("kamradt")
    for name, text in ESSAYS.items():
        (folder / "hay").mkdir(exist_ok=True)
        (folder / "hay" / name).write_text(text)
    text = (SPECS / "kamradt-classic.yaml").read_text()
    grid = text[text.index("grid:") : text.index("prompt:")]
    text = text.replace("corpus: paul-graham", "files: hay/*.txt")
    text = text.replace(grid, f"grid: {{context_lengths: {LENGTHS}, depths: {DEPTHS}}}\n")
    (folder / "spec.yaml").write_text(text)
    loaded = load_spec(str(folder / "spec.yaml"))
    spec = loaded.data
    run = Path(compile_run(loaded.data, loaded.base_dir, folder / "out", {}).path)
    requests = {}
    for shard in (run / "answers" / "requests").iterdir():
        for line in map(json.loads, shard.read_text().splitlines()):
            requests[line["custom_id"]] = line
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    return spec, cells, requests


def test_the_openai_request_is_needlehaystacks(compiled):
    spec, cells, requests = compiled
    needle = spec["needles"][0]
    files = [ESSAYS[name] for name in sorted(ESSAYS)]
    checked = 0
    for cell in cells:
        if cell["model"] != "openai/gpt-4.1":
            continue
        length, depth = cell["context_length"]["target"], cell["depth"]["requested"]
        assert cell["needles"][0]["depth_requested"] == depth  # as the grid gives it: 1.358, not 1.36
        expected = reference_context(files, needle["text"], length, depth, 200)
        assert requests[cell["cell_id"]]["body"]["messages"] == [
            {"role": "system", "content": OPENAI_SYSTEM},
            {"role": "user", "content": expected},
            {"role": "user", "content": needle["question"] + OPENAI_SUFFIX},
        ], (length, depth)
        checked += 1
    assert checked == len(LENGTHS) * len(DEPTHS)


def test_the_anthropic_request_is_needlehaystacks_prompt(compiled):
    spec, cells, requests = compiled
    needle = spec["needles"][0]
    files = [ESSAYS[name] for name in sorted(ESSAYS)]
    checked = 0
    for cell in cells:
        if not cell["model"].startswith("anthropic/"):
            continue
        length, depth = cell["context_length"]["target"], cell["depth"]["requested"]
        context = reference_context(files, needle["text"], length, depth, 200)
        params = requests[cell["cell_id"]]["params"]
        system = params["system"] if isinstance(params["system"], str) else params["system"][0]["text"]
        user = params["messages"][0]["content"]
        user = user if isinstance(user, str) else "".join(block["text"] for block in user)
        prefill = params["messages"][1]["content"]
        prefill = prefill if isinstance(prefill, str) else prefill[0]["text"]
        assert (params["messages"][0]["role"], params["messages"][1]["role"]) == ("user", "assistant")
        assert f"{system}\n\nHuman: {user}\n\nAssistant: {prefill}" == ANTHROPIC_PROMPT.format(
            context=context, retrieval_question=needle["question"]
        ), (length, depth)
        checked += 1
    assert checked == len(LENGTHS) * len(DEPTHS)


def test_the_context_is_the_length_less_the_buffer_in_cl100k_tokens(compiled):
    """The essay tokens and the needle's make L - 200 tokens as token lists (the reference's arithmetic); the
    recorded haystack count is the context as sent, encoded whole, which may join the needle's newline to the
    period before it."""
    spec, cells, requests = compiled
    enc = encoding("cl100k_base")
    for cell in cells:
        if cell["model"] == "openai/gpt-4.1":
            context = requests[cell["cell_id"]]["body"]["messages"][1]["content"]
            assert cell["context_length"]["counted_by"] == "cl100k_base"
            assert cell["context_length"]["haystack"] == enc.count(context)
            assert abs(cell["context_length"]["haystack"] - (cell["context_length"]["target"] - 200)) <= 2
            assert cell["needles"][0]["text"] == spec["needles"][0]["text"]


def test_period_token_is_for_text_haystacks(cli, spec_file, tmp_path):
    (tmp_path / "items.jsonl").write_text('{"id": "a", "text": "A."}\n{"id": "b", "text": "B."}\n')
    (tmp_path / "q.jsonl").write_text('{"item": "a", "question": "Q?", "answer": "A"}\n')
    spec = spec_file(
        "nspec: 1\nname: t\n"
        "haystack: {stack: {items: items.jsonl, questions: q.jsonl}, boundary: period-token}\n"
        'grid: {context_lengths: [300], depths: [50]}\nprompt: {user: "{haystack} {question}"}\n'
        "models: [{id: openai/gpt-4.1-mini}]\n"
    )
    result = cli("validate", spec)
    assert result.code == 2
    assert "spec.yaml:3:71: haystack.boundary: a stack is cut between its items" in result.err, result.err
