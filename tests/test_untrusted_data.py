"""Every data file a spec names is as untrusted as a provider's bytes: published rows (GraphWalks, MRCR), QA sets
(SQuAD, HotpotQA), needle sets, stack files and counts files — built here, small — nested 100,000 deep, holding a
number of 5,000 digits or a lone surrogate, or holding a record no reply could fail or pass, end in exit 2 with the
file, the record and the field named, validate, plan and compile saying the same; a file an included spec names is
read beside the file that names it."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nspec.compiler.json_input import Source, decode

DEEP = "[" * 100_000 + "]" * 100_000
BIG = "1" * 5_000
# Where a file's text takes a poison: a value of a field of its own, or the inside of a text the family reads.
VALUE, TEXT = '"@value@"', "@text@"
POISONS = {
    "nested 100,000 deep": (lambda text: text.replace(VALUE, DEEP).replace(TEXT, ""), "nested more than 64 deep"),
    "a number of 5,000 digits": (
        lambda text: text.replace(VALUE, BIG).replace(TEXT, ""),
        "a number too large to read (beyond a 64-bit float)",
    ),
    "a lone surrogate": (
        lambda text: text.replace(VALUE, "1").replace(TEXT, "\\ud800"),
        "a lone surrogate (half of a UTF-16 pair, such as \\ud800)",
    ),
}
ROW = {"prompt": f"Find the parents of node cd.{TEXT}", "answer_nodes": ["ab"], "problem_type": "parents"}
TURNS = [
    {"role": "user", "content": "Write a poem about tapirs"},
    {"role": "assistant", "content": f"A poem{TEXT}."},
    {"role": "user", "content": "Prepend ab to the 1st (1 indexed) poem about tapirs."},
]


def task_spec(task: str, lengths: str = "[2000]", model: str = "openai/gpt-4.1-mini", extra: str = "") -> str:
    return (
        f"nspec: 1\nname: t\ntask: {task}\ngrid: {{context_lengths: {lengths}}}\nprompt: {{reserve_tokens: 64}}\n"
        f"models: [{{id: {model}}}]\n{extra}"
    )


def squad(context: str = "The ferry's captain is Ann.", answer: str = "Ann") -> dict:
    qas = [{"question": "Who is the captain?", "id": "1", "answers": [{"text": answer}], "is_impossible": False}]
    return {"data": [{"title": "Ferries", "paragraphs": [{"context": context, "qas": qas}]}]}


def hotpotqa(context: list | None = None, answer: str = "3") -> list:
    paragraphs = [[f"Place {k}", [f"Place {k} lies by the river. ", f"It has {k} bridges."]] for k in range(10)]
    return [
        {"question": "How many bridges has Place 3?", "answer": answer, "context": paragraphs, "_id": "q"},
        {"question": "How many?", "answer": "1", "context": paragraphs if context is None else context, "_id": "r"},
    ]


NEEDLE_SET = [
    {
        "id": "0001",
        "needle": "Actually, {CHAR} swam beside {1} last year.",
        "questions": {"onehop": "Which character has been to Australia?"},
        "tests": {"T01": {"input_args": [f"the Great Barrier Reef{TEXT}"]}},
        "character_set": ["Oskar", "Priya", "Yuki"],
    }
]
NOLIMA_SPEC = """\
nspec: 1
name: t
haystack: {corpus: austen}
task: {name: nolima, params: {needle_set: set.json}}
grid: {context_lengths: [1000], depths: [50]}
prompt: {user: "{haystack} {question}", reserve_tokens: 40}
models: [{id: openai/gpt-4.1-mini}]
"""
STACK_SPEC = """\
nspec: 1
name: t
haystack: {stack: {items: items.jsonl, questions: q.jsonl}}
grid: {context_lengths: [1000], depths: [50]}
prompt: {user: "{haystack} {question}"}
models: [{id: openai/gpt-4.1-mini}]
"""
COUNTS_SPEC = NOLIMA_SPEC.replace("{name: nolima, params: {needle_set: set.json}}", "nolima").replace(
    "openai/gpt-4.1-mini", "anthropic/claude-haiku-4-5"
)


def with_value(record: dict) -> str:
    """``record`` as JSON with a field of its own whose value takes the poison."""
    return json.dumps(record)[:-1] + f', "extra": {VALUE}}}'


# Each file: what it is written as (poison placeholders in it), the spec reading it, and where a refusal is located:
# the spec's key that names the file, and the file's line and column.
FILES: dict[str, tuple[Callable[[Path], None], str, str, str]] = {
    "graphwalks rows": (
        lambda d: (d / "rows.jsonl").write_text(json.dumps({**ROW, "prompt": "p"}) + "\n" + with_value(ROW) + "\n"),
        task_spec("{name: graphwalks, params: {data: rows.jsonl}}"),
        "spec.yaml:3:41: task.params.data: rows.jsonl:2:",
        "",
    ),
    "an mrcr message": (
        lambda d: (d / "rows.jsonl").write_text(
            json.dumps(
                {"prompt": json.dumps(TURNS)[:-1] + f", {VALUE}]", "answer": "abA", "random_string_to_prepend": "ab"}
            ).replace(f'\\"{VALUE[1:-1]}\\"', VALUE)
            + "\n"
        ),
        task_spec("{name: mrcr, params: {data: rows.jsonl}}"),
        "spec.yaml:3:35: task.params.data: rows.jsonl:1:",
        "",
    ),
    "a squad file": (
        lambda d: (d / "squad.json").write_text(
            with_value(squad(f"The ferry's captain is Ann.{TEXT}")).replace('"extra"', '"version"')
        ),
        task_spec("{name: ruler, params: {task: qa_1, squad: squad.json}}"),
        "spec.yaml:3:49: task.params.squad: squad.json:1:",
        "(SQuAD 2.0's dev set is a JSON file)",
    ),
    "a hotpotqa file": (
        lambda d: (d / "hotpotqa.json").write_text(
            json.dumps(hotpotqa()).replace('"_id": "r"', f'"_id": {VALUE}').replace("3 bridges.", f"3 bridges.{TEXT}")
        ),
        task_spec("{name: ruler, params: {task: qa_2, hotpotqa: hotpotqa.json}}"),
        "spec.yaml:3:52: task.params.hotpotqa: hotpotqa.json:1:",
        "(HotpotQA's dev set in its distractor setting is a JSON file)",
    ),
    "a needle set": (
        lambda d: (d / "set.json").write_text("[\n" + with_value(NEEDLE_SET[0]) + "\n]\n"),
        NOLIMA_SPEC,
        "spec.yaml:4:43: task.params.needle_set: set.json:2:",
        "",
    ),
    "a stack file": (
        lambda d: (
            (d / "items.jsonl").write_text(
                "".join(json.dumps({"id": f"i{i}", "text": f"Ship {i} left at {i} o'clock."}) + "\n" for i in range(4))
                + with_value({"id": "i4", "text": f"Ship 4 left{TEXT}."})
                + "\n"
            ),
            (d / "q.jsonl").write_text('{"item": "i1", "question": "When did ship 1 leave?", "answer": "1"}\n'),
        ),
        STACK_SPEC,
        "./items.jsonl:5:",
        "",
    ),
    "a counts file": (
        lambda d: (d / "spec.counts.json").write_text(
            json.dumps({"nspec_counts": 1, "models": {"anthropic/claude-haiku-4-5": {"counted_by": f"x{TEXT}"}}})[:-3]
            + f', "counts": {{}}, "composition": "verified", "extra": {VALUE}}}}}}}'
        ),
        COUNTS_SPEC,
        "spec.counts.json:1:",
        "rerun nspec calibrate",
    ),
}


def refused_alike(cli, spec: str, at: str, *said: str) -> str:
    """validate, plan and compile all exit 2, their first line the same, starting ``at`` and saying ``said``."""
    first = []
    for command in (["validate"], ["plan"], ["compile", "-o", "out"]):
        result = cli(*command, spec)
        assert result.code == 2, (command, result.err)
        assert "internal error" not in result.err and "Traceback" not in result.err, (command, result.err)
        first.append(
            next(line for line in result.lines if not line.startswith("loading") and " loaded in " not in line)
        )
    assert first[0] == first[1] == first[2], first
    assert first[0].startswith(at), first[0]
    for words in said:
        assert words in first[0], first[0]
    return first[0]


@pytest.mark.parametrize("poison", list(POISONS))
@pytest.mark.parametrize("file", list(FILES))
def test_a_poisoned_data_file_is_refused_alike_naming_the_file_and_the_record(cli, spec_file, tmp_path, file, poison):
    write, spec, at, said = FILES[file]
    write(tmp_path)
    spoil, reason = POISONS[poison]
    for path in tmp_path.iterdir():
        if path.suffix in (".json", ".jsonl"):
            path.write_text(spoil(path.read_text(encoding="utf-8")), encoding="utf-8")
    refused_alike(cli, spec_file(spec), at, reason, said)


def test_a_lone_surrogate_in_the_spec_itself_is_refused_where_it_stands(cli, spec_file):
    spec = task_spec("graphwalks").replace("{reserve_tokens: 64}", '{reserve_tokens: 64, system: "Be \\ud800 brief."}')
    refused_alike(cli, spec_file(spec), "spec.yaml:5:38: prompt.system: holds a lone surrogate")


def test_a_number_of_5000_digits_in_the_spec_itself_is_refused_where_it_stands(cli, spec_file):
    refused_alike(cli, spec_file(task_spec("graphwalks", extra=f"seed: {BIG}\n")), "spec.yaml:7:7: seed: a number of")


@pytest.mark.parametrize(
    "name, content, spec, at, said",
    [
        (
            "hotpotqa.json",
            json.dumps(hotpotqa(context=[]), indent=1),
            task_spec("{name: ruler, params: {task: qa_2, hotpotqa: hotpotqa.json}}"),
            "spec.yaml:3:52: task.params.hotpotqa: hotpotqa.json:",
            "[1].context: a question without paragraphs: no document would hold its answer",
        ),
        (
            "hotpotqa.json",
            json.dumps(hotpotqa(context=[["Place 9", []], ["Place 8", [" "]]]), indent=1),
            task_spec("{name: ruler, params: {task: qa_2, hotpotqa: hotpotqa.json}}"),
            "spec.yaml:3:52: task.params.hotpotqa: hotpotqa.json:",
            "[1].context: a question whose paragraphs hold no sentence: no document would hold its answer",
        ),
        (
            "hotpotqa.json",
            json.dumps(hotpotqa(answer=" "), indent=1),
            task_spec("{name: ruler, params: {task: qa_2, hotpotqa: hotpotqa.json}}"),
            "spec.yaml:3:52: task.params.hotpotqa: hotpotqa.json:",
            "[0].answer: an empty answer: every reply holds it, so no reply could fail the question",
        ),
        (
            "squad.json",
            json.dumps(squad(answer=""), indent=1),
            task_spec("{name: ruler, params: {task: qa_1, squad: squad.json}}"),
            "spec.yaml:3:49: task.params.squad: squad.json:",
            "data[0].paragraphs[0].qas[0].answers[0].text: an empty answer: every reply holds it",
        ),
        (
            "squad.json",
            json.dumps(squad(answer="Bo"), indent=1),
            task_spec("{name: ruler, params: {task: qa_1, squad: squad.json}}"),
            "spec.yaml:3:49: task.params.squad: squad.json:",
            "data[0].paragraphs[0].qas[0].answers: no answer its paragraph holds (SQuAD's answers are spans of it)",
        ),
        (
            "rows.jsonl",
            json.dumps(ROW).replace(TEXT, "") + "\n" + json.dumps({**ROW, "answer_nodes": []}) + "\n",
            task_spec("{name: graphwalks, params: {data: rows.jsonl}}"),
            "spec.yaml:3:41: task.params.data: rows.jsonl:2: `answer_nodes` is empty",
            "F1 scores such a cell 0 whatever the reply",
        ),
        (
            "rows.jsonl",
            json.dumps({"prompt": json.dumps(TURNS), "answer": "  ", "random_string_to_prepend": "ab"}),
            task_spec("{name: mrcr, params: {data: rows.jsonl}}"),
            "spec.yaml:3:35: task.params.data: rows.jsonl:1: `answer` is empty",
            "the cell would pass a reply that says nothing",
        ),
        (
            "rows.jsonl",
            json.dumps({"prompt": json.dumps(TURNS), "answer": "ab ", "random_string_to_prepend": "ab"}),
            task_spec("{name: mrcr, params: {data: rows.jsonl}}"),
            "spec.yaml:3:35: task.params.data: rows.jsonl:1: `answer` holds nothing past `random_string_to_prepend`",
            "the cell would pass a reply that is only the string",
        ),
    ],
    ids=["hotpotqa-no-context", "hotpotqa-blank-paragraphs", "hotpotqa-empty-answer", "squad-empty-answer",
         "squad-answer-not-in-context",
         "graphwalks-no-answer-nodes", "mrcr-empty-answer", "mrcr-answer-only-the-string"],
)  # fmt: skip
def test_a_record_no_reply_could_fail_or_pass_is_refused_alike(cli, spec_file, tmp_path, name, content, spec, at, said):
    (tmp_path / name).write_text(content.replace(TEXT, ""), encoding="utf-8")
    line = refused_alike(cli, spec_file(spec), at, said)
    assert line.count(":") >= 5  # the file's line (and column) after the spec's


@pytest.mark.parametrize(
    "question, key", [({"answer": " "}, "answer"), ({"answer": "1", "alternates": ["one", ""]}, "alternates")]
)
def test_a_stack_question_with_an_empty_answer_is_refused_alike(cli, spec_file, tmp_path, question, key):
    (tmp_path / "items.jsonl").write_text(
        "".join(json.dumps({"id": f"i{i}", "text": f"Ship {i} left at {i} o'clock."}) + "\n" for i in range(4))
    )
    row = {"item": "i1", "question": "When did ship 1 leave?", **question}
    (tmp_path / "q.jsonl").write_text(
        json.dumps({"item": "i2", "question": "?", "answer": "2"}) + "\n" + json.dumps(row)
    )
    refused_alike(cli, spec_file(STACK_SPEC), "./q.jsonl:2:1: ", f"`{key}` holds an empty answer: every reply holds it")


def test_a_counts_file_value_of_the_wrong_kind_is_refused_at_its_line_and_column(cli, spec_file, tmp_path):
    """A counts file as calibrate writes it, one value per line: a value the schema refuses is named where it stands,
    not at the file's first character."""
    counts = {"a" * 64: 5, "b" * 64: -5}
    model = {"counted_by": "x", "composition": "verified", "counts": counts}
    text = json.dumps({"nspec_counts": 1, "models": {"anthropic/claude-haiku-4-5": model}}, indent=1)
    (tmp_path / "spec.counts.json").write_text(text, encoding="utf-8")
    refused_alike(
        cli,
        spec_file(COUNTS_SPEC),
        f"spec.counts.json:9:73: models.anthropic/claude-haiku-4-5.counts.{'b' * 64}: -5 is less than the minimum",
        "rerun nspec calibrate",
    )


def test_nolima_ids_joined_from_distinct_parts_never_meet(cli, spec_file, tmp_path):
    """Experiment `a` with test `b/c` and experiment `a/b` with test `c` once made one pair id (and compile said
    "change the seed"): the parts are escaped, so the cells are distinct and every one is made."""
    one = {**NEEDLE_SET[0], "id": "a", "tests": {"b/c": {"input_args": ["Lake Bled"]}}}
    two = {**NEEDLE_SET[0], "id": "a/b", "tests": {"c": {"input_args": ["Lake Como"]}}}
    (tmp_path / "set.json").write_text(json.dumps([one, two]), encoding="utf-8")
    name = spec_file(NOLIMA_SPEC)
    for command in (["validate"], ["plan"]):
        assert cli(*command, name).code == 0
    result = cli("compile", name, "-o", "out")
    assert result.code == 0, result.err
    cells = [json.loads(line) for line in (Path(result.out.strip()) / "cells.jsonl").read_text().splitlines()]
    assert sorted(c["data"]["pair"] for c in cells) == ["a%2Fb/c/onehop", "a/b%2Fc/onehop"]
    assert len({c["cell_id"] for c in cells}) == 2


INCLUDED = {
    "graphwalks": (
        "task: {name: graphwalks, params: {data: rows.jsonl}}",
        lambda d: (d / "rows.jsonl").write_text(json.dumps(ROW).replace(TEXT, "") + "\n"),
    ),
    "mrcr": (
        "task: {name: mrcr, params: {data: rows.jsonl}}",
        lambda d: (d / "rows.jsonl").write_text(
            json.dumps(
                {"prompt": json.dumps(TURNS).replace(TEXT, ""), "answer": "abA", "random_string_to_prepend": "ab"}
            )
        ),
    ),
    "mrcr pieces": (
        "task: {name: mrcr, params: {pieces: pieces.txt}}",
        lambda d: (d / "pieces.txt").write_text("\n\n".join(f"Piece {i} of the harbour's log." for i in range(12))),
    ),
    "a graphwalks sweep": (
        "task: graphwalks\ngrid: {params: {data: [rows.jsonl]}}",
        lambda d: (d / "rows.jsonl").write_text(json.dumps(ROW).replace(TEXT, "") + "\n"),
    ),
}


@pytest.mark.parametrize("family", list(INCLUDED))
def test_a_file_an_included_spec_names_is_read_beside_that_spec(cli, spec_file, tmp_path, family):
    """As docs/writing-specs.md says: paths are relative to the file that writes them — a family's data, pieces and
    needle set (`Family.path_params`) as RULER's QA sets, in `task.params` and a `grid.params` sweep alike. A file of
    the same name beside the including spec, which holds no rows, is never read."""
    task, write = INCLUDED[family]
    (tmp_path / "base").mkdir()
    write(tmp_path / "base")
    (tmp_path / "rows.jsonl").write_text("", encoding="utf-8")
    spec_file(task + "\n", "base/task.yaml")
    spec = "nspec: 1\nname: t\ninclude: base/task.yaml\ngrid: {context_lengths: [2000]}\nprompt: {reserve_tokens: 64}\n"
    name = spec_file(spec + "models: [{id: openai/gpt-4.1-mini}]\n")
    for command in (["validate"], ["plan"]):
        result = cli(*command, name)
        assert result.code == 0, (command, result.err)
    result = cli("compile", name, "-o", "out")
    assert result.code == 0, result.err
    manifest = json.loads((Path(result.out.strip()) / "manifest.json").read_text())
    read = [f["name"] for f in manifest["task"].get("files", [])]
    data = [f["path"] for f in manifest["provenance"]["files"] if f["role"] == "data"]
    assert read == data == [f"base/{next(p.name for p in (tmp_path / 'base').iterdir() if p.suffix != '.yaml')}"]


def test_a_needle_set_an_included_spec_names_is_read_beside_it_and_builtin_stays_builtin(cli, spec_file, tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "set.json").write_text(json.dumps(NEEDLE_SET).replace(TEXT, ""), encoding="utf-8")
    spec_file("task: {name: nolima, params: {needle_set: set.json}}\n", "base/own.yaml")
    spec_file("task: {name: nolima, params: {needle_set: builtin}}\n", "base/builtin.yaml")
    for included, own in (("own", True), ("builtin", False)):
        spec = NOLIMA_SPEC.replace(
            "task: {name: nolima, params: {needle_set: set.json}}", f"include: base/{included}.yaml"
        )
        result = cli("compile", spec_file(spec), "-o", "out")
        assert result.code == 0, result.err
        cells = [json.loads(line) for line in (Path(result.out.strip()) / "cells.jsonl").read_text().splitlines()]
        assert all(("swam beside the Great Barrier Reef" in c["data"]["needle"]) == own for c in cells)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=20,
)


def paths_of(value: object, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(value, dict):
        out += [p for key, child in value.items() for p in paths_of(child, (*path, key))]
    elif isinstance(value, list):
        out += [p for i, child in enumerate(value) for p in paths_of(child, (*path, i))]
    return out


@settings(max_examples=100, deadline=None)
@given(value=JSON_VALUES, indent=st.sampled_from([None, 0, 1, 3]), pick=st.randoms())
def test_a_refusal_is_located_at_the_value_it_names(value, indent, pick):
    """Wherever a value stands in any document, however it is laid out, a refusal of it names its line and column:
    decoding the document from there gives the value back."""
    text = json.dumps(value, indent=indent, ensure_ascii=pick.random() < 0.5)
    source = Source("f.json", text.encode())
    path = pick.choice(paths_of(value))
    error = decode(source).error("why", path)
    line = text.split("\n")[error.line - 1]
    found, _ = json.JSONDecoder().raw_decode(line + "\n" + "\n".join(text.split("\n")[error.line :]), error.column - 1)
    assert found == functools.reduce(lambda v, step: v[step], path, value)
    assert str(error).startswith(f"f.json:{error.line}:{error.column}: ")
