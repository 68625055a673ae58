"""Stack items may start with any character a text can start with (NIAN's limericks open with quotes, `#`, `-`),
and whatever a stack makes compile refuse, validate refuses first, with the same located message, for every item
of the file."""

import json

import pytest

from nspec.compiler.haystack import TokenizedText, load_haystack, stack_item_problem
from nspec.compiler.run_writer import compile_run
from nspec.compiler.tokenizers import chat_framing, encoding
from nspec.spec import load_spec

SPEC = """\
nspec: 1
name: t
haystack: {stack: {items: items.jsonl, questions: q.jsonl}}
grid: {context_lengths: [700, 1500], depths: [0, 40, 100], repeats: [1, 2]}
prompt: {user: "{haystack}\\n\\n{question}"}
models: [{id: openai/gpt-4.1-mini}, {id: openai/gpt-4}]
"""
OPENINGS = ['"Quoted', "#tag", "-dash", "'s odd", "\u00c9mile", "(paren", "...dots", "1990", "*star", "\u201ccurly"]
ENDINGS = ["late.", "late!", "late", "late?\u201d", "late...", "late)", "late -"]


def write_stack(folder, n=120, first_of=lambda i: OPENINGS[i % len(OPENINGS)]):
    with open(folder / "items.jsonl", "w") as fh:
        for i in range(n):
            text = f"{first_of(i)} item {i} was {i % 13} days\nlate, said line {i}, {ENDINGS[i % len(ENDINGS)]}"
            fh.write(json.dumps({"id": f"i{i}", "text": text}) + "\n")
    (folder / "q.jsonl").write_text('{"item": "i3", "question": "How late was item 3?", "answer": "3"}\n')


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_every_item_start_is_a_clean_cut(name):
    """The tokens of a stack cut at an item's start are the tokens of its two parts, whatever the item opens with."""
    texts = [f"{o} item {i}\nsecond line {e}" for i, o in enumerate(OPENINGS) for e in ENDINGS]
    tokenizer = encoding(name)
    for separator in ("\n", "\n\n", "\n---\n"):
        joined, starts = "", []
        for text in texts:
            joined += separator if joined else ""
            starts.append(len(joined.encode()))
            joined += text
        tt = TokenizedText(joined, tokenizer, starts)
        whole = tokenizer.encode(joined)
        for pos in starts[1:]:
            data = joined.encode()
            head, tail = data[:pos].decode(), data[pos:].decode()
            assert tokenizer.encode(head) + tokenizer.encode(tail) == whole, (separator, tail[:12])
            assert tt.boundary(tt.token_at_byte(pos)) and tt.starts[tt.token_at_byte(pos)] == pos


def test_a_stack_of_any_openings_compiles_exactly(spec_file, tmp_path):
    write_stack(tmp_path)
    loaded = load_spec(spec_file(SPEC))
    run = compile_run(loaded.data, loaded.base_dir, tmp_path / "out", {}).path
    requests = {}
    for shard in (run / "answers" / "requests").iterdir():
        for line in map(json.loads, shard.read_text().splitlines()):
            requests[line["custom_id"]] = line["body"]
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    assert len(cells) == 2 * 2 * 3 * 2
    for cell in cells:
        tokenizer = encoding(cell["context_length"]["counted_by"])
        texts = [m["content"] for m in requests[cell["cell_id"]]["messages"]]
        assert cell["context_length"]["prompt"] == chat_framing(len(texts)) + sum(
            len(tokenizer.encode(t)) for t in texts
        )
        assert cell["needles"][0]["text"].startswith("'s odd")


def expect_both_refuse(cli, spec, message):
    for command in ("validate", "compile"):
        result = cli(command, spec)
        assert result.code == 2, (command, result.err)
        assert message in result.err, (command, result.err)
        assert "Traceback" not in result.err


def test_a_separator_without_a_final_newline_is_refused_by_validate_and_compile(cli, spec_file, tmp_path):
    write_stack(tmp_path)
    spec = spec_file(SPEC.replace("q.jsonl}}", 'q.jsonl}, separator: " | "}'))
    expect_both_refuse(cli, spec, "spec.yaml:3:72: haystack.separator: a stack's separator must end with a newline")


def test_an_item_compile_could_not_cut_is_refused_on_load_wherever_it_lies(cli, spec_file, tmp_path):
    """The 2,000th item of a stack is checked as the first is (a compile of a short context reads only a few)."""
    write_stack(tmp_path, n=2000, first_of=lambda i: "/slash" if i == 1999 else "Plain")
    expect_both_refuse(cli, spec_file(SPEC), "items.jsonl:2000:1: item 'i1999' starts with '/'")


def test_a_slash_opening_is_cut_exactly_when_nothing_before_the_newlines_is_punctuation():
    items = {"a": "ends in a word", "b": "/starts with a slash"}
    assert stack_item_problem(items, "\n\n") is None
    assert stack_item_problem({**items, "a": "ends in a period."}, "\n\n") is not None
    assert stack_item_problem({**items, "a": "ends in a period."}, "\n--- next\n") is None
    for text in ("ends in a word\n\n/starts", "ends in a period.\n--- next\n/starts"):
        head, tail = text.split("/")
        o200k = encoding("o200k_base")
        assert o200k.encode(head) + o200k.encode("/" + tail) == o200k.encode(text)
    joined = "ends in a period.\n\n/starts"
    assert encoding("o200k_base").encode("ends in a period.\n\n") + encoding("o200k_base").encode(
        "/starts"
    ) != encoding("o200k_base").encode(joined)


@pytest.mark.parametrize(
    "tail, message",
    [
        ('{"id": "x", "body": "no text"}\n]\n', "items.json:122:1: needs `id` and a non-empty `text`"),
        ('{"id": "x", "text": "broken}\n]\n', "items.json:122:29: not JSON (unexpected control character in string)"),
        ('{"id": "x", "text": "fine"}\n] trailing\n', "items.json:123:3: not JSON (unexpected content after document)"),
    ],
    ids=["missing field", "bad element", "text after"],
)
def test_a_json_array_of_items_is_read_and_refused_as_lines_are(cli, spec_file, tmp_path, tail, message):
    """A stack file may be one JSON array (NIAN's are); what is wrong is named by the line its object starts on."""
    write_stack(tmp_path)
    items = (tmp_path / "items.jsonl").read_text().splitlines()  # 120 objects: lines 2 to 121 of the array
    (tmp_path / "items.json").write_text("[\n" + ",\n".join(items) + ",\n" + tail)
    expect_both_refuse(cli, spec_file(SPEC.replace("items.jsonl", "items.json")), message)


def test_a_json_array_of_items_reads_as_its_lines_do(spec_file, tmp_path):
    write_stack(tmp_path)
    items = (tmp_path / "items.jsonl").read_text().splitlines()
    (tmp_path / "items.json").write_text("[\n" + ",\n".join(items) + "\n]\n")
    from_lines = load_spec(spec_file(SPEC)).data
    from_array = load_spec(spec_file(SPEC.replace("items.jsonl", "items.json"))).data
    a = load_haystack(from_lines["haystack"], str(tmp_path))
    b = load_haystack(from_array["haystack"], str(tmp_path))
    assert (a.items, a.questions, a.documents) == (b.items, b.questions, b.documents) and len(a.items) == 120
