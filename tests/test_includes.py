"""`include:` and `defaults:`: merge order, relative paths, locations, resolved output."""

import json

import pytest

from nspec.errors import SpecError
from nspec.spec import load_spec
from nspec.spec.schema import schema_issues
from nspec.spec.yamlsource import SourceMap
from tests.conftest import BASE, EXAMPLES, SPECS


def test_include_merges_mappings_and_the_includer_wins(spec_file):
    spec_file("grid: {context_lengths: [1000, 2000], depths: [0, 100], trials: 3}\nseed: 5\n", "parts/base.yaml")
    spec = load_spec(spec_file("include: parts/base.yaml\n" + BASE))
    assert spec.data["grid"]["context_lengths"] == [1000]  # lists are replaced
    assert spec.data["grid"]["trials"] == 3  # mappings merge key by key
    assert spec.data["seed"] == 5
    assert spec.files == ["spec.yaml", "parts/base.yaml"]


def test_later_includes_win_over_earlier(spec_file):
    spec_file("seed: 1\n", "a.yaml")
    spec_file("seed: 2\n", "b.yaml")
    assert load_spec(spec_file("include: [a.yaml, b.yaml]\n" + BASE)).data["seed"] == 2


def test_nested_include_paths_are_relative_to_each_file(spec_file):
    spec_file("doc", "parts/docs/one.txt")
    spec_file("include: more/inner.yaml\n", "parts/outer.yaml")
    spec_file("haystack: {files: '../docs/*.txt'}\n", "parts/more/inner.yaml")
    text = "include: parts/outer.yaml\n" + BASE.replace("haystack: {corpus: austen}\n", "")
    spec = load_spec(spec_file(text))
    assert spec.data["haystack"]["files"] == "parts/docs/*.txt"


def test_errors_in_included_files_point_into_them(spec_file):
    spec_file("grid: {trials: 0}\n", "parts/base.yaml")
    with pytest.raises(SpecError) as info:
        load_spec(
            spec_file(
                "include: parts/base.yaml\n" + BASE.replace("grid: {", "grid: {trials: 2, ").replace("trials: 2, ", "")
            )
        )
    assert [str(i) for i in info.value.issues] == ["parts/base.yaml:1:16: grid.trials: must be at least 1 (got 0)"]


def test_syntax_error_in_include_names_the_including_line(spec_file):
    spec_file("seed: [1\n", "parts/base.yaml")
    with pytest.raises(SpecError) as info:
        load_spec(spec_file("include: parts/base.yaml\n" + BASE))
    (issue,) = info.value.issues
    assert issue.location.file == "parts/base.yaml"
    assert issue.message.endswith("(included from spec.yaml:1:10)")


def test_defaults_merge_into_models_and_judges(spec_file):
    text = BASE.replace(
        "[{id: openai/gpt-4.1-mini}]",
        "[{id: openai/gpt-4.1-mini, params: {temperature: 1}}, {id: anthropic/claude-haiku-4-5}]",
    )
    text += (
        "defaults: {mode: batch, params: {temperature: 0, max_tokens: 100}}\n"
        "scoring:\n  - judge: {models: [openai/gpt-4o]}\n"
    )
    spec = load_spec(spec_file(text))
    first, second = spec.data["models"]
    assert first["params"] == {"temperature": 1, "max_tokens": 100}
    assert second["params"] == {"temperature": None, "max_tokens": 100}  # Claude's API takes none: left out
    assert first["mode"] == second["mode"] == "batch"
    assert spec.data["scoring"][0]["judge"]["models"][0]["mode"] == "batch"
    assert "defaults" not in spec.data


def test_errors_from_defaults_point_at_the_defaults(spec_file):
    text = BASE + "defaults: {params: {max_tokens: 900}}\n"
    with pytest.raises(SpecError) as info:
        load_spec(spec_file(text))
    assert [str(i) for i in info.value.issues] == [
        "spec.yaml:12:33: models[0].params.max_tokens: max_tokens (900) exceeds reserve_tokens (300): the answer "
        "could overflow the context length; raise reserve_tokens or lower max_tokens"
    ]


def test_defaults_typo_reported_once(spec_file):
    with pytest.raises(SpecError) as info:
        load_spec(spec_file(BASE + "defaults: {mdoe: batch}\n"))
    assert [str(i) for i in info.value.issues] == [
        "spec.yaml:12:12: defaults.mdoe: unknown key 'mdoe'; did you mean 'mode'?"
    ]


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: p.name)
def test_resolved_spec_is_complete_valid_and_stable(spec, monkeypatch):
    """The resolved spec (what a run directory keeps) validates by itself and resolves to itself."""
    monkeypatch.chdir(SPECS.parent)
    loaded = load_spec(f"specs/{spec.name}")
    data = loaded.data
    assert "include" not in data and "defaults" not in data
    assert schema_issues(data, SourceMap()) == []
    assert data["seed"] == data.get("seed", 0) and "vary" in data["haystack"] and "trials" in data["grid"]
    assert all("mode" in m for m in data["models"])
    json.dumps(data)  # plain data only


def test_resolution_is_idempotent(spec_file):
    from ruamel.yaml import YAML

    spec = load_spec(spec_file(BASE))
    out = spec_file("", "resolved.yaml")
    with open(out, "w") as fh:
        YAML(typ="safe", pure=True).dump(spec.data, fh)
    assert load_spec(out).data == {**spec.data}
