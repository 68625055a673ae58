"""Every bad input gets one located message, exit code 2 and no traceback."""

import glob
import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import BASE
from tests.test_import import vllm_line


def expect_error(cli, spec: str, *expected: str) -> None:
    result = cli("validate", spec)
    assert result.code == 2
    assert "Traceback" not in result.out + result.err
    issues = result.lines[:-1]  # the last line counts the errors
    assert issues == list(expected)


def test_empty_file(cli, spec_file):
    expect_error(cli, spec_file(""), "spec.yaml:1:1: the file is empty; a spec starts with `nspec: 1`")


def test_comment_only_file_is_empty(cli, spec_file):
    expect_error(cli, spec_file("# nothing yet\n"), "spec.yaml:1:1: the file is empty; a spec starts with `nspec: 1`")


def test_directory(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkdir("specs")
    expect_error(cli, "specs", "specs:1:1: is a directory, not a spec file")


def test_missing_file(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expect_error(cli, "nope.yaml", "nope.yaml:1:1: no such file")


def test_non_utf8(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_bytes(b"nspec: 1\nname: caf\xe9\n")
    expect_error(
        cli,
        "spec.yaml",
        "spec.yaml:2:10: not UTF-8: byte 0xe9 cannot start or continue a character; save the file as UTF-8",
    )


def test_tabs_in_indentation(cli, spec_file):
    expect_error(
        cli,
        spec_file("nspec: 1\ngrid:\n\tdepths: [1]\n"),
        "spec.yaml:3:1: YAML syntax: found character '\\t' that cannot start any token "
        "(while scanning for the next token); indent with spaces, not tabs",
    )


def test_unclosed_quote(cli, spec_file):
    expect_error(
        cli,
        spec_file('nspec: 1\nname: "abc\nseed: 1\n'),
        "spec.yaml:2:7: YAML syntax: unclosed quote: the quoted text that starts here never ends",
    )


def test_unclosed_bracket(cli, spec_file):
    result = cli("validate", spec_file("nspec: 1\ngrid: {depths: [1, 2\n"))
    assert result.code == 2
    assert result.lines[0].startswith("spec.yaml:2:")
    assert "YAML syntax" in result.lines[0]


def test_duplicate_key_names_both_lines(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE + "seed: 1\nseed: 2\n"),
        "spec.yaml:13:1: seed: duplicate key 'seed'; it is already set at line 12",
    )


def test_duplicate_nested_key(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE.replace("depths: [50]}", "depths: [50], depths: [10]}")),
        "spec.yaml:9:47: grid.depths: duplicate key 'depths'; it is already set at line 9",
    )


def test_unknown_key_with_suggestion(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE.replace("prompt: {user:", "prompt: {usr:")),
        "spec.yaml:10:1: prompt: missing required key 'user' in `prompt`",
        "spec.yaml:10:10: prompt.usr: unknown key 'usr'; did you mean 'user'?",
    )


def test_unknown_key_without_close_match_lists_allowed(cli, spec_file):
    result = cli("validate", spec_file(BASE + "report: {colour_scheme: dark}\n"))
    assert result.lines[0] == (
        "spec.yaml:12:10: report.colour_scheme: unknown key 'colour_scheme'; "
        "allowed keys: charts, effective_length_threshold, title"
    )


def test_wrong_type(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE.replace("trials", "x").replace("depths: [50]", "depths: [50], trials: two")),
        "spec.yaml:9:55: grid.trials: must be a whole number, not text",
    )


def test_missing_required_key(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE.replace("models: [{id: openai/gpt-4.1-mini}]\n", "")),
        "spec.yaml:1:1: missing required key 'models' at the top of the spec",
    )


@pytest.mark.parametrize("length, column", [("0", 26), ("-5", 26)])
def test_zero_or_negative_length(cli, spec_file, length, column):
    expect_error(
        cli,
        spec_file(BASE.replace("[1000]", f"[{length}]")),
        f"spec.yaml:9:{column}: grid.context_lengths[0]: must be at least 1 (got {length})",
    )


def test_depth_150(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE.replace("depths: [50]", "depths: [150]")),
        "spec.yaml:9:42: grid.depths[0]: must be at most 100 (got 150)",
    )


def test_depth_range_beyond_100(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE.replace("depths: [50]", "depths: {from: 0, to: 150, steps: 3}")),
        "spec.yaml:9:55: grid.depths.to: must be at most 100 (got 150)",
    )


def test_empty_models_list(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE.replace("models: [{id: openai/gpt-4.1-mini}]", "models: []")),
        "spec.yaml:11:9: models: must not be empty",
    )


def test_include_cycle_reports_the_chain(cli, spec_file):
    spec_file("include: b.yaml\n", "a.yaml")
    spec_file("include: a.yaml\n", "b.yaml")
    expect_error(
        cli,
        spec_file("include: a.yaml\n" + BASE),
        "b.yaml:1:10: include: include cycle: spec.yaml → a.yaml → b.yaml → a.yaml (included from a.yaml:1:10)",
    )


def test_self_include(cli, spec_file):
    expect_error(
        cli,
        spec_file("include: spec.yaml\n" + BASE),
        "spec.yaml:1:10: include: include cycle: spec.yaml → spec.yaml",
    )


def test_missing_include(cli, spec_file):
    expect_error(
        cli,
        spec_file("include: [parts/nothere.yaml]\n" + BASE),
        "spec.yaml:1:11: include[0]: included file not found: parts/nothere.yaml",
    )


def test_template_without_haystack(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE.replace('user: "{haystack} {question}"', 'user: "{question}"')),
        "spec.yaml:10:16: prompt.user: the user template must contain {haystack} exactly once (found 0)",
    )


def test_template_with_haystack_twice(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE.replace('"{haystack} {question}"', '"{haystack} {question} {haystack}"')),
        "spec.yaml:10:16: prompt.user: the user template must contain {haystack} exactly once (found 2)",
    )


def test_template_with_unknown_placeholder(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE.replace('"{haystack} {question}"', '"{haystack} {question} {contxt}"')),
        "spec.yaml:10:16: prompt.user: unknown placeholder {contxt}; `user` may use {haystack}, {question}",
    )


def test_template_with_unbalanced_brace(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE.replace('"{haystack} {question}"', '"{haystack} {question"')),
        "spec.yaml:10:16: prompt.user: expected '}' before end of string; write {{ or }} for a literal brace",
    )


def test_yaml_date_where_text_is_meant(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE.replace("name: t", "name: 2024-01-01")),
        "spec.yaml:2:7: name: must be text, not a date; YAML reads 2024-01-01 as a date; "
        'quote it ("2024-01-01") if you meant text',
    )


def test_yaml_date_where_a_number_is_meant(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE + "seed: 2024-01-01\n"),
        "spec.yaml:12:7: seed: must be a whole number, not a date; YAML reads 2024-01-01 as a date",
    )


def test_yaml_float_where_text_is_meant(cli, spec_file):
    expect_error(
        cli,
        spec_file(BASE.replace("name: t", "name: 1.10")),
        "spec.yaml:2:7: name: must be text, not a number; YAML reads 1.10 as a number (1.1); "
        'quote it ("1.10") if you meant text',
    )


def test_python_tag_is_refused_and_nothing_runs(cli, spec_file, tmp_path):
    marker = tmp_path / "PWNED"
    spec = spec_file(BASE + f'description: !!python/object/apply:os.system ["touch {marker}"]\n')
    expect_error(
        cli,
        spec,
        "spec.yaml:12:14: description: tag !!python/object/apply:os.system is not allowed; specs use plain YAML only",
    )
    assert not marker.exists()


def test_50_mb_spec_is_refused_quickly(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open("big.yaml", "w") as fh:
        fh.write("description: " + "x" * 50_000_000 + "\n")
    start = time.monotonic()
    expect_error(cli, "big.yaml", "big.yaml:1:1: is larger than 1,048,576 bytes, the most nspec reads from such a file")
    assert time.monotonic() - start < 5  # generous: refusing must not mean parsing


# -- haystack sources that cannot fill a context: exit 2 at validate, naming the path ------------------------------

FILES_SPEC = BASE.replace("haystack: {corpus: austen}", "haystack: {files: 'hay/*'}")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_bytes(b""), "hay/a.txt is empty"),
        (lambda p: p.write_text(" \n\t\n  "), "hay/a.txt holds only white space"),
        (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), "hay/a.txt is binary (it holds NUL bytes)"),
        (lambda p: os.mkfifo(p), "hay/a.txt is a FIFO, not a regular file: refused unread"),
        (
            lambda p: p.write_bytes("A first line.\nUne journée d'été.\n".encode("latin-1")),
            "hay/a.txt is not UTF-8 text: byte 0xe9 at offset 23 (line 2)",
        ),
        (lambda p: p.write_bytes("Un café".encode()[:-1]), "hay/a.txt is not UTF-8 text: it ends in the middle of a"),
    ],
    ids=["empty", "whitespace", "binary", "fifo", "latin-1", "cut character"],
)
def test_a_haystack_file_that_cannot_fill_a_context(cli, spec_file, tmp_path, make, message):
    (tmp_path / "hay").mkdir()
    make(tmp_path / "hay" / "a.txt")
    spec = spec_file(FILES_SPEC)
    for command in ("validate", "plan", "compile"):
        result = cli(command, spec)
        assert result.code == 2, (command, result.err)
        assert f"spec.yaml:3:19: haystack.files: {message}" in result.err, result.err
        assert "Traceback" not in result.err


def test_a_haystack_file_past_the_size_cap_is_refused_by_validate(cli, spec_file, tmp_path, monkeypatch):
    monkeypatch.setattr("nspec.compiler.haystack.MAX_SOURCE_BYTES", 1000)
    (tmp_path / "hay").mkdir()
    (tmp_path / "hay" / "a.txt").write_text("A quiet sentence. " * 100)
    for command in ("validate", "compile"):
        result = cli(command, spec_file(FILES_SPEC))
        assert result.code == 2
        assert "haystack.files: hay/a.txt is larger than 1,000 bytes, the most nspec reads from such a file" in (
            result.err
        )


def test_utf8_is_checked_across_the_chunks_a_file_is_read_in():
    from nspec.compiler.haystack import text_problem

    text = "Une journée d'été.\n".encode()
    assert text_problem([text[:9], text[9:10], text[10:]]) is None  # é cut between chunks
    bad = text[:10] + b"\xe9" + text[11:]
    assert text_problem([b"line one\n", bad[:10], bad[10:]]) == (
        "is not UTF-8 text: byte 0xc3 at offset 18 (line 2)"  # the é left open is the first bad byte
    )


STACK_SPEC = BASE.replace(
    "haystack: {corpus: austen}", "haystack: {stack: {items: items.jsonl, questions: q.jsonl}}"
).replace(BASE[BASE.index("needles:") : BASE.index("grid:")], "")
ITEMS = "".join(f'{{"id": "i{i}", "text": "Ship {i} left at {i} o\'clock."}}\n' for i in range(5))


@pytest.mark.parametrize(
    "items, questions, message",
    [
        (
            ITEMS.replace('"i2"', "i2"),
            '{"item": "i1", "question": "When?", "answer": "1"}\n',
            "items.jsonl:3:8: not JSON (unexpected character, expected a JSON value)",
        ),
        (
            ITEMS,
            '{"item": "i9", "question": "When?", "answer": "9"}\n',
            "q.jsonl:1:1: item 'i9' is not in items.jsonl",
        ),
        (ITEMS, '{"item": "i1", "answer": "1"}\n', "q.jsonl:1:1: needs `item`, `question` and `answer`"),
        (
            ITEMS.replace("Ship 3", "Sh\xefp 3"),
            '{"item": "i1", "question": "When?", "answer": "1"}\n',
            "haystack.stack.items: items.jsonl is not UTF-8 text: byte 0xef at offset",
        ),
    ],
    ids=["bad json", "unknown item", "missing field", "latin-1"],
)
def test_validate_reads_a_stack_as_compile_does(cli, spec_file, tmp_path, items, questions, message):
    (tmp_path / "items.jsonl").write_bytes(items.encode("latin-1"))
    (tmp_path / "q.jsonl").write_text(questions)
    spec = spec_file(STACK_SPEC)
    for command in ("validate", "compile"):
        result = cli(command, spec)
        assert result.code == 2, (command, result.err)
        assert message in result.err, result.err


def test_a_glob_of_directories_only(cli, spec_file, tmp_path):
    (tmp_path / "hay" / "sub").mkdir(parents=True)
    result = cli("validate", spec_file(FILES_SPEC))
    assert result.code == 2
    assert "haystack.files: 'hay/*' matches only directories; give a pattern of files" in result.err


def test_a_device_as_a_stack_file_is_refused_unread(cli, spec_file, tmp_path):
    needles = BASE[BASE.index("needles:") : BASE.index("grid:")]
    spec = BASE.replace("haystack: {corpus: austen}", "haystack: {stack: {items: /dev/zero, questions: q.jsonl}}")
    spec = spec.replace(needles, "")
    (tmp_path / "q.jsonl").write_text('{"item": "a", "question": "Q?", "answer": "1"}\n')
    path = spec_file(spec)
    outside = cli("validate", path)
    assert outside.code == 2 and "haystack.stack.items: /dev/zero lies outside the spec's root" in outside.err
    result = cli("validate", path, "--allow-path", "/dev")  # allowed, and still never opened for reading
    assert result.code == 2
    assert "haystack.stack.items: /dev/zero is a device, not a regular file: refused unread" in result.err


def test_an_empty_file_found_at_compile_time_names_its_path(cli, spec_file, tmp_path):
    """A file emptied between validate and compile is still refused, by compile, with its path."""
    from nspec.compiler.haystack import load_haystack
    from nspec.errors import SpecError

    (tmp_path / "hay").mkdir()
    (tmp_path / "hay" / "a.txt").write_text("")
    with pytest.raises(SpecError, match=r"a\.txt is empty"):
        load_haystack({"files": "hay/*.txt"}, str(tmp_path))


# -- input that once crashed or hung nspec: exit 2, located, in bounded time --------------------------------------


def bounded(cli, *args: str, within: float = 60):
    start = time.monotonic()
    result = cli(*args)
    assert time.monotonic() - start < within, args  # a hang guard, generous on a loaded machine
    assert result.code == 2, result.err
    assert "Traceback" not in result.out + result.err and "internal error" not in result.err
    return result


@pytest.mark.parametrize(
    "grid, message",
    [
        ("{context_lengths: {from: .nan, to: 2000, steps: 3}, depths: [50]}", "grid.context_lengths.from: YAML reads"),
        ("{context_lengths: {from: 1000, to: .inf, steps: 3}, depths: [50]}", "grid.context_lengths.to: YAML reads"),
        ("{context_lengths: [1000], depths: [-.inf]}", "grid.depths[0]: YAML reads -.inf as a number that is not"),
        ("{context_lengths: {from: 0, to: 2000, steps: 3, spacing: log}, depths: [50]}", "must be at least 1 (got 0)"),
        ("{context_lengths: {from: 1000.5, to: 2000, steps: 3}, depths: [50]}", "must be a whole number"),
        ("{context_lengths: [1000], depths: {steps: 1000000000}}", "grid.depths.steps: must be at most 1000"),
        ("{context_lengths: {from: 1, to: 2, steps: 100000}, depths: [5]}", "context_lengths.steps: must be at most"),
        (
            "{context_lengths: [1000], depths: {from: 0, to: 100, steps: 1000}}",
            "grid.depths: the range gives duplicate",
        ),
        ("{context_lengths: [1000000000000000000000], depths: [50]}", "must be at most 10000000"),
        ("{context_lengths: [1e21], depths: [50]}", "must be at most 10000000"),
    ],
)
def test_grid_values_are_checked_before_they_are_expanded(cli, spec_file, grid, message):
    spec = spec_file(BASE.replace("grid: {context_lengths: [1000], depths: [50]}", f"grid: {grid}"))
    for command in ("validate", "plan"):
        assert message in bounded(cli, command, spec).err


def test_a_grid_of_too_many_cells_is_refused_before_any_work(cli, spec_file):
    grid = "grid: {context_lengths: {from: 1000, to: 900000, steps: 1000}, depths: {steps: 101}, trials: 1000}"
    spec = spec_file(BASE.replace("grid: {context_lengths: [1000], depths: [50]}", grid))
    result = bounded(cli, "plan", spec)
    assert "the grid makes 101,000,000 cells, more than the cap of 2,000,000" in result.err
    assert "--max-cells" in result.err
    small = spec_file(BASE.replace("depths: [50]", "depths: [0, 50, 100]"), "small.yaml")
    assert "3 cells (the cap is 2,000,000: --max-cells)" in cli("plan", small).out
    assert "the grid makes 3 cells, more than the cap of 2" in bounded(cli, "compile", small, "--max-cells", "2").err


@pytest.mark.parametrize(
    "text, message",
    [
        ("scoring: contains\n", "scoring: must be a list, not text"),
        ("scoring: 1.5\n", "scoring: must be a list, not a number"),
    ],
)
def test_wrong_shapes_of_sections(cli, spec_file, text, message):
    assert message in bounded(cli, "validate", spec_file(BASE + text)).err


def test_vars_that_are_not_a_mapping(cli, spec_file):
    spec = spec_file(BASE.replace("vars: {n: {digits: 7}}", "vars: [1, 2]"))
    assert "needles[0].vars: must be a mapping (key: value), not a list" in bounded(cli, "validate", spec).err


def test_deep_nesting_is_refused_where_it_starts(cli, spec_file):
    deep = "[" * 1000 + "]" * 1000
    result = bounded(cli, "validate", spec_file(BASE + f"description: {deep}\n"))
    assert "spec.yaml:12:77: nested more than 64 levels deep; no spec needs that" in result.err


@pytest.mark.parametrize("params", ["{max_tokens: many}", "{max_tokens: 0}", "{max_completion_tokens: [1]}"])
def test_an_answer_budget_that_is_not_a_number(cli, spec_file, params):
    spec = spec_file(BASE.replace("{id: openai/gpt-4.1-mini}", f"{{id: openai/gpt-4.1-mini, params: {params}}}"))
    assert "must be a whole number of tokens, at least 1" in bounded(cli, "plan", spec).err


def test_an_include_of_a_fifo_is_refused_without_blocking(cli, spec_file, tmp_path):
    os.mkfifo(tmp_path / "part.yaml")
    result = bounded(cli, "validate", spec_file("include: part.yaml\n" + BASE))
    assert "part.yaml:1:1: is a FIFO, not a regular file: refused unread" in result.err


def test_an_include_of_a_device_is_refused_unread(cli, spec_file):
    spec = spec_file("include: /dev/zero\n" + BASE)
    assert "include: /dev/zero lies outside the spec's root" in bounded(cli, "validate", spec).err
    allowed = bounded(cli, "validate", spec, "--allow-path", "/dev")
    assert "/dev/zero:1:1: is a device, not a regular file: refused unread" in allowed.err


def test_an_include_larger_than_a_spec_is_refused_on_the_bytes_read(cli, spec_file, tmp_path):
    (tmp_path / "big.yaml").write_text("description: " + "x" * 2_000_000 + "\n")
    result = bounded(cli, "validate", spec_file("include: big.yaml\n" + BASE))
    assert "big.yaml:1:1: is larger than 1,048,576 bytes" in result.err


@pytest.mark.parametrize("where", ["include", "files", "items"])
def test_a_nul_byte_in_a_path(cli, spec_file, where):
    text = {
        "include": 'include: "a\\0b.yaml"\n' + BASE,
        "files": BASE.replace("{corpus: austen}", '{files: "a\\0b"}'),
        "items": BASE.replace("{corpus: austen}", '{stack: {items: "a\\0b", questions: q.jsonl}}'),
    }[where]
    result = bounded(cli, "validate", spec_file(text))
    assert "holds a NUL byte" in result.err or "cannot hold a NUL byte" in result.err


def test_an_unlistenable_emulator_port(cli):
    result = cli("emulator", "--port", "99999")
    assert result.code == 2 and "65535" in result.out + result.err


# -- run folders and output paths that are not what they should be: exit 2, naming them -----------------------------

RUN_COMMANDS = [
    ["submit"],
    ["status"],
    ["collect"],
    ["collect", "--from", "out.jsonl"],
    ["score"],
    ["rescore", "--spec", "spec.yaml"],
    ["report"],
    ["view"],
    ["export", "--for", "vllm"],
    ["dissent"],
    ["variance"],
    ["answers"],
]


@pytest.mark.parametrize("command", RUN_COMMANDS, ids=" ".join)
def test_every_command_on_a_folder_without_a_manifest_names_it(cli, spec_file, tmp_path, command):
    spec_file(BASE)
    (tmp_path / "notarun").mkdir()
    (tmp_path / "notarun" / "cells.jsonl").write_text("")
    result = cli(command[0], "notarun", *command[1:])
    assert result.code == 2, result.err
    assert "notarun is not a run directory (no manifest.json); compile a spec first" in result.err


@pytest.mark.parametrize(
    "manifest, message",
    [
        ('{"run_id": "x", ', "notarun/manifest.json cannot be read (Expecting"),
        ('{"run_id": "x"}', "notarun/manifest.json lacks models: the run directory is damaged"),
        ('{"run_id": "x", "models": []}', "notarun/spec.yaml is missing: the run directory is damaged"),
    ],
    ids=["cut", "no models", "no spec"],
)
def test_a_damaged_run_directory_is_named(cli, tmp_path, monkeypatch, manifest, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notarun").mkdir()
    (tmp_path / "notarun" / "manifest.json").write_text(manifest)
    for command in ("status", "report", "score"):
        result = cli(command, "notarun")
        assert result.code == 2, result.err
        assert message in result.err


def test_an_output_path_through_a_file_is_refused_naming_it(cli, spec_file, tmp_path):
    spec = spec_file(BASE)
    (tmp_path / "afile").write_text("")
    for command in ("compile", "run"):
        result = cli(command, spec, "-o", "afile/out")
        assert result.code == 2, result.err
        assert "cannot write the run directory under afile/out: afile is not a folder" in result.err
    run = cli("compile", spec, "-o", "outputs").out.strip()
    shards = sorted(glob.glob(f"{run}/answers/requests/*.jsonl"))
    lines = [json.loads(line) for f in shards for line in Path(f).read_text().splitlines()]
    with open("out.jsonl", "w") as fh:
        fh.writelines(json.dumps(vllm_line(line, "1234567", i)) + "\n" for i, line in enumerate(lines))
    assert cli("collect", run, "--from", "out.jsonl").code == 0
    assert cli("score", run).code == 0
    for command in ("report", "answers"):
        result = cli(command, run, "-o", "afile/x")
        assert result.code == 2, result.err
        assert "cannot write afile/x: Not a directory — a part of this path is a file, not a folder" in result.err


# -- judge prompts: refused at validate, plan and compile, before anything is paid for ---------------------------------

JUDGE_PROMPT = "scoring:\n  - contains: '{answer}'\n  - judge: {models: [openai/gpt-4.1-mini], %s}\n"


@pytest.mark.parametrize(
    "judge, message",
    [
        (
            "prompt: nspek",
            "14:52: scoring[1].judge.prompt: unknown judge prompt preset 'nspek': the presets are needlehaystack, "
            "nian, nspec; did you mean 'nspec'?",
        ),
        (
            "prompt: ''",
            "14:52: scoring[1].judge.prompt: the judge prompt is empty: name a preset (needlehaystack, nian, nspec) or "
            "give {system, user}",
        ),
        (
            "prompt: needlehaystack, rubric: pass-fail",
            "14:52: scoring[1].judge.prompt: prompt needlehaystack grades by rubric score-10, but `rubric` is "
            "pass-fail: remove `rubric` or set it to score-10",
        ),
        (
            "prompt: nian, rubric: score-10, threshold: 7",
            "14:52: scoring[1].judge.prompt: prompt nian grades by rubric pass-fail, but `rubric` is score-10: remove "
            "`rubric` or set it to pass-fail",
        ),
        (
            "prompt: needlehaystack",
            "14:12: scoring[1].judge: rubric score-10 (prompt needlehaystack grades 1-10) without `threshold` gives "
            "scores, not verdicts, so the judges must grade every cell alone: give `threshold` (the lowest score that "
            "passes, e.g. 7) or leave the judge alone in scoring",
        ),
        (
            "prompt: {system: 'Grade {answr}.', user: 'Q: {question} A: {answer}'}",
            "14:61: scoring[1].judge.prompt.system: unknown placeholder {answr}; a judge prompt may use {answer}, "
            "{expected}, {needle}, {question}",
        ),
        (
            "prompt: {user: 'Reply {\"verdict\": 1} to {answer}'}",
            '14:59: scoring[1].judge.prompt.user: placeholder {"verdict": 1} must be a plain name such as {answer}; '
            "write {{ and }} for literal braces",
        ),
        (
            "prompt: {user: 'Grade {answer} }'}",
            "14:59: scoring[1].judge.prompt.user: Single '}' encountered in format string; write {{ or }} for a "
            "literal brace",
        ),
        (
            "prompt: {system: ' ', user: 'Grade {answer}'}",
            "14:61: scoring[1].judge.prompt.system: `system` is empty: write the judge's system message, or leave it "
            "out",
        ),
        ("prompt: {user: ''}", "14:59: scoring[1].judge.prompt.user: `user` is empty: write what asks the judge"),
        (
            "prompt: {user: 'Is {expected} right?'}",
            "14:59: scoring[1].judge.prompt.user: the judge never sees the answer it grades: put {answer} in `user`",
        ),
        (
            "prompt: {system: 'Grade {answer}'}",
            "14:44: scoring[1].judge.prompt: missing required key 'user' in `scoring[1].judge.prompt`",
        ),
    ],
)
def test_a_judge_prompt_that_cannot_be_sent_is_refused(cli, spec_file, judge, message):
    spec = spec_file(BASE + JUDGE_PROMPT % judge)
    for command in ("validate", "plan", "compile"):
        result = cli(command, spec)
        assert result.code == 2, (command, result.err)
        assert f"spec.yaml:{message}" in result.err, (command, result.err)
        assert "Traceback" not in result.err


# -- a context length too short for what compile puts in every cell: refused alike by validate, plan and compile ------

LOCAL_QUESTIONS = '{"item": "i1", "question": "When did ship 1 leave?", "answer": "1"}\n'


@pytest.mark.parametrize(
    "spec, at, message",
    [
        (
            BASE.replace("[1000]", "[20]").replace('"}', '", reserve_tokens: 5}'),
            "spec.yaml:9:25",
            "(openai/gpt-4.1-mini, length 20): the prompt and needles alone need more than 20 tokens",
        ),
        (
            BASE.replace("[1000]", "[10]")
            .replace("{corpus: austen}", "{corpus: austen, boundary: period-token}")
            .replace('"}', '", reserve_tokens: 5}'),
            "spec.yaml:9:25",
            "(openai/gpt-4.1-mini, length 10): the needles alone need 8 of the 5 context tokens",
        ),
        (
            STACK_SPEC.replace("[1000]", "[20]").replace('"}', '", reserve_tokens: 5}'),
            "spec.yaml:4:25",
            "(openai/gpt-4.1-mini, length 20): the prompt and needles alone need more than 20 tokens",
        ),
        (
            BASE.replace(BASE[BASE.index("needles:") : BASE.index("grid:")], "task: {name: nolima}\n").replace(
                "[1000]", "[310]"
            ),
            "spec.yaml:5:25",
            "(openai/gpt-4.1-mini, length 310): the prompt and needles alone need more than 310 tokens",
        ),
        (
            BASE.replace(
                BASE[BASE.index("needles:") : BASE.index("grid:")],
                "task: {name: context-rot, params: {distractors: 4}}\n",
            ).replace("[1000]", "[360]"),
            "spec.yaml:5:25",
            "(openai/gpt-4.1-mini, length 360): the prompt and needles alone need more than 360 tokens",
        ),
        (
            "nspec: 1\nname: t\ntask: graphwalks\ngrid: {context_lengths: [400]}\nprompt: {reserve_tokens: 256}\n"
            "models: [{id: openai/gpt-4.1-mini}]\n",
            "spec.yaml:4:25",
            "(openai/gpt-4.1-mini, length 400): the graphwalks task at its smallest size (1) needs more than 144 "
            "tokens (the length less reserve_tokens 256)",
        ),
        (  # the haystack's own tokens decide, at the longest length
            BASE.replace("{corpus: austen}", "{files: tiny.txt, repeat: error}").replace("[1000]", "[400, 2000]"),
            "spec.yaml:9:25",
            "so they would repeat (140 times); haystack.repeat is `error`: use a larger haystack (e.g. corpus: "
            "[austen, kjv]), shorter context lengths, or `repeat: allow`",
        ),
    ],
    ids=["needles", "period-token", "stack", "nolima", "context-rot", "graphwalks", "repeat-error"],
)
def test_a_length_too_short_for_the_prompt_is_refused_alike_by_validate_plan_and_compile(
    cli, spec_file, tmp_path, spec, at, message
):
    (tmp_path / "items.jsonl").write_text(ITEMS)
    (tmp_path / "q.jsonl").write_text(LOCAL_QUESTIONS)
    (tmp_path / "tiny.txt").write_text("The cat sat. The dog ran. A bird sang.\n")
    name = spec_file(spec)
    said = []
    for command in ("validate", "plan", "compile"):
        result = cli(command, name)
        assert result.code == 2 and "Traceback" not in result.err, (command, result.err)
        said.append(result.lines[0])
    assert said[0] == said[1] == said[2]
    assert said[0].startswith(f"{at}: grid.context_lengths: cell openai-gpt-4-1-mini-"), said[0]
    assert said[0].endswith(message), said[0]


@pytest.mark.parametrize(
    "task",
    ["{name: graphwalks}", "{name: mrcr}", "{name: ruler, params: {task: vt}}"],
    ids=["graphwalks", "mrcr", "ruler-vt"],
)
def test_validate_sizes_a_generated_task_for_a_local_model_as_compile_does(cli, spec_file, task):
    # validate counts a local model with its own tokenizer, as compile does (a floor of a token a text let every
    # generated context pass, to be refused by compile): what fits passes, sized by the model's own count.
    spec = (
        f"nspec: 1\nname: t\ntask: {task}\ngrid: {{context_lengths: [2000]}}\nprompt: {{reserve_tokens: 64}}\n"
        "models: [{id: local/gemma-3-270m, params: {max_tokens: 64}}]\n"
    )
    result = cli("validate", spec_file(spec))
    assert result.code == 0, result.err


def test_a_parameter_past_64_bits_is_refused_where_it_stands(cli, spec_file, tmp_path):
    """A whole number past 64 bits in a model's params (a seed, a stop list's item) is refused by validate and
    compile alike, at its key: the request files would hold it, and read back it becomes an inexact float."""
    big = 2**70
    spec = spec_file(
        BASE.replace(
            "{id: openai/gpt-4.1-mini}", f"{{id: openai/gpt-4.1-mini, params: {{seed: {big}, stop: [1, {-big}]}}}}"
        )
    )
    for command in (["validate", spec], ["compile", spec, "-o", str(tmp_path / "out")]):
        result = cli(*command)
        assert result.code == 2
        assert f"models[0].params.seed: {big} is past 64 bits" in result.err
        assert f"models[0].params.stop[1]: {-big} is past 64 bits" in result.err
    assert (
        cli(
            "validate",
            spec_file(
                BASE.replace(
                    "{id: openai/gpt-4.1-mini}", "{id: openai/gpt-4.1-mini, params: {seed: 9223372036854775807}}"
                )
            ),
        ).code
        == 0
    )
