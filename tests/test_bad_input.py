"""Every bad input gets one located message, exit code 2 and no traceback."""

import os
import time

import pytest

from tests.conftest import BASE


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
    expect_error(cli, "big.yaml", "big.yaml:1:1: file is 50,000,014 bytes; a spec may be at most 1,048,576 bytes")
    assert time.monotonic() - start < 5  # generous: refusing must not mean parsing


# -- haystack sources that cannot fill a context: exit 2 at validate, naming the path ------------------------------

FILES_SPEC = BASE.replace("haystack: {corpus: austen}", "haystack: {files: 'hay/*'}")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_bytes(b""), "hay/a.txt is empty"),
        (lambda p: p.write_text(" \n\t\n  "), "hay/a.txt holds only white space"),
        (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), "hay/a.txt is binary (it holds NUL bytes)"),
        (lambda p: os.mkfifo(p), "hay/a.txt is not a regular file (a FIFO, socket or device): refused unread"),
    ],
    ids=["empty", "whitespace", "binary", "fifo"],
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
    result = cli("validate", spec_file(spec))
    assert result.code == 2
    refused = "haystack.stack.items: /dev/zero is not a regular file (a FIFO, socket or device): refused unread"
    assert refused in result.err


def test_an_empty_file_found_at_compile_time_names_its_path(cli, spec_file, tmp_path):
    """A file emptied between validate and compile is still refused, by compile, with its path."""
    from nspec.compiler.haystack import load_haystack
    from nspec.errors import SpecError

    (tmp_path / "hay").mkdir()
    (tmp_path / "hay" / "a.txt").write_text("")
    with pytest.raises(SpecError, match=r"a\.txt is empty"):
        load_haystack({"files": "hay/*.txt"}, str(tmp_path))
