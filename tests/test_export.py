"""`nspec export --for vllm` is honest about what it writes: a run that also has models vLLM cannot run exports its
OpenAI-format part and names what it left out (or `--models` names what to export), and `--shards N` writes N files
per model or says why fewer."""

from __future__ import annotations

import pytest

from tests.test_import import SPEC

MIXED = SPEC.replace(
    "models: [{id: local/gemma-3-270m}]",
    "models: [{id: openai/gpt-4.1-mini, name: mini}, {id: anthropic/claude-haiku-4-5}]",
).replace("grid: {", "grid: {trials: 2, ")


@pytest.fixture
def mixed_run(spec_file, tmp_path, cli):
    assert cli("compile", spec_file(MIXED), "-o", str(tmp_path / "o")).code == 0
    (run,) = (tmp_path / "o" / "gpu").iterdir()
    return run


def exported(run):
    return sorted(p.name for p in (run / "export" / "vllm" / "answers").iterdir())


def test_the_openai_part_of_a_mixed_run_is_exported_and_the_rest_named(mixed_run, cli):
    done = cli("export", str(mixed_run), "--for", "vllm")
    assert done.code == 0, done.err
    assert exported(mixed_run) == ["mini-0001.jsonl"]
    assert (
        "note: anthropic/claude-haiku-4-5 left out: its requests are in anthropic's format; vLLM's run-batch reads "
        "OpenAI-format chat requests" in done.err
    )


@pytest.mark.parametrize("name", ["mini", "openai/gpt-4.1-mini"], ids=["by name", "by id"])
def test_models_names_what_to_export(mixed_run, cli, name):
    done = cli("export", str(mixed_run), "--for", "vllm", "--models", name)
    assert done.code == 0, done.err
    assert exported(mixed_run) == ["mini-0001.jsonl"] and "note:" not in done.err


def test_models_that_cannot_be_exported_or_are_not_in_the_run_are_refused(mixed_run, cli):
    named = cli("export", str(mixed_run), "--models", "anthropic/claude-haiku-4-5")
    assert named.code == 2
    assert "--models anthropic/claude-haiku-4-5: its requests are in anthropic's format" in named.err
    unknown = cli("export", str(mixed_run), "--models", "gpt-5")
    assert unknown.code == 2
    assert "--models gpt-5: not a model of this run (its models: mini, anthropic/claude-haiku-4-5)" in unknown.err


def test_fewer_files_than_shards_are_said_with_why(mixed_run, cli):
    done = cli("export", str(mixed_run), "--shards", "4")
    assert done.code == 0, done.err
    assert exported(mixed_run) == ["mini-0001.jsonl", "mini-0002.jsonl"]
    assert (
        "note: mini: 2 files, not 4: its requests form 2 groups sharing a prompt prefix, and a group stays in one file"
        in done.err
    )
    assert "mini: 2 files" not in cli("export", str(mixed_run), "--shards", "2").err  # as asked: nothing to say


def test_exporting_again_keeps_the_engine_s_output_files(mixed_run, cli):
    assert cli("export", str(mixed_run), "--shards", "2").code == 0
    folder = mixed_run / "export" / "vllm" / "answers"
    (folder / "mini-0001.out.jsonl").write_text("{}\n")  # where the printed vllm command writes its output
    assert cli("export", str(mixed_run), "--shards", "1").code == 0
    assert exported(mixed_run) == ["mini-0001.jsonl", "mini-0001.out.jsonl"]  # the old second file is gone
