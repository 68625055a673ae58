"""The one registry every kind of extension comes through: a plugin that cannot load, is not of its kind, or takes a
name another distribution registers is refused by `validate`, `plan` and `compile` alike, naming its distribution and
its entry point (exit 2), never a traceback and never dropped in silence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.distributions import install, reload_plugins

SPEC = """\
nspec: 1
name: t
haystack: {corpus: austen}
needles: [{text: "The code is 4417.", question: "What is the code?", answer: "4417"}]
grid: {context_lengths: [600], depths: [50]}
prompt: {user: "{haystack} {question}"}
models: [{id: openai/gpt-4.1-mini}]
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield tmp_path / "site"
    monkeypatch.undo()
    reload_plugins()


@pytest.mark.parametrize("command", ["validate", "plan", "compile"])
def test_a_family_named_like_a_built_in_is_refused_naming_both(site, monkeypatch, cli, spec_file, command):
    module = "from nspec.compiler.tasks.needle import FAMILY\n"
    install(site, monkeypatch, "rival-needles", {"rival": module}, {"nspec.tasks": {"needle": "rival:FAMILY"}})
    result = cli(command, spec_file(SPEC))
    assert result.code == 2, result.err
    assert "two installed distributions register the task family 'needle'" in result.err
    assert "entry point `needle = nspec.compiler.tasks.needle:FAMILY` of needlespec" in result.err
    assert "entry point `needle = rival:FAMILY` of rival-needles 0.1" in result.err
    assert "Traceback" not in result.err


def test_a_plugin_that_fails_to_import_is_named_with_its_distribution(site, monkeypatch, cli, spec_file):
    install(
        site,
        monkeypatch,
        "broken-family",
        {"broken": "import not_installed_anywhere\n"},
        {"nspec.tasks": {"broken": "broken:FAMILY"}},
    )
    result = cli("validate", spec_file(SPEC + "task: broken\n"))
    assert result.code == 2
    assert (
        "task: the task family 'broken' (entry point `broken = broken:FAMILY` of broken-family 0.1) failed to load: "
        "ModuleNotFoundError: No module named 'not_installed_anywhere'" in result.err
    )


def test_a_plugin_registered_under_another_name_is_refused(site, monkeypatch, cli, spec_file):
    module = "from nspec.compiler.tasks.needle import FAMILY\n"
    install(site, monkeypatch, "misnamed", {"misnamed": module}, {"nspec.tasks": {"needles2": "misnamed:FAMILY"}})
    result = cli("validate", spec_file(SPEC + "task: needles2\n"))
    assert result.code == 2
    assert (
        "the task family 'needles2' (entry point `needles2 = misnamed:FAMILY` of misnamed 0.1) calls itself 'needle'"
        in result.err
    )


# -- scorers and metrics ---------------------------------------------------------------------------------------------

SCORER = """
from nspec.scorers import Scorer, Verdict


class Always(Scorer):
    name = "always"
    metric = "{metric}"
    options_schema = {schema}

    def grade(self, answer, inp, options):
        return Verdict("pass", "always", "always", 1.0)


ALWAYS = Always()
"""
VALID = '{"description": "Passes every answer.", "const": True}'


def scorer_module(metric: str = "pass_rate", schema: str = VALID) -> str:
    return SCORER.replace("{metric}", metric).replace("{schema}", schema)


@pytest.mark.parametrize("command", ["validate", "plan", "compile"])
def test_a_scorer_that_fails_to_import_is_named_with_its_distribution(site, monkeypatch, cli, spec_file, command):
    install(
        site,
        monkeypatch,
        "broken-scorer",
        {"broken_scorer": "import not_installed_anywhere\n"},
        {"nspec.scorers": {"always": "broken_scorer:ALWAYS"}},
    )
    result = cli(command, spec_file(SPEC + "scoring: [{always: true}]\n"))
    assert result.code == 2, result.err
    assert (
        "scoring[0].always: the scorer 'always' (entry point `always = broken_scorer:ALWAYS` of broken-scorer 0.1) "
        "failed to load: ModuleNotFoundError: No module named 'not_installed_anywhere'" in result.err
    )
    assert "Traceback" not in result.err


@pytest.mark.parametrize("command", ["validate", "plan", "compile"])
def test_a_scorer_whose_options_schema_is_not_a_json_schema_is_refused(site, monkeypatch, cli, spec_file, command):
    module = scorer_module(schema='{"type": "strnig"}')
    install(site, monkeypatch, "odd-scorer", {"odd_scorer": module}, {"nspec.scorers": {"always": "odd_scorer:ALWAYS"}})
    result = cli(command, spec_file(SPEC + "scoring: [{always: true}]\n"))
    assert result.code == 2, result.err
    assert (
        "the scorer 'always' (entry point `always = odd_scorer:ALWAYS` of odd-scorer 0.1) declares an options schema "
        "that is not a JSON Schema (type: 'strnig' is not valid under any of the given schemas)" in result.err
    )
    assert "Traceback" not in result.err


@pytest.mark.parametrize("command", ["validate", "plan", "compile"])
def test_a_scorer_named_like_a_built_in_is_refused_naming_both(site, monkeypatch, cli, spec_file, command):
    module = scorer_module().replace('name = "always"', 'name = "contains"')
    install(site, monkeypatch, "rival-scorers", {"rival": module}, {"nspec.scorers": {"contains": "rival:ALWAYS"}})
    result = cli(command, spec_file(SPEC + "scoring: [{contains: '{answer}'}]\n"))
    assert result.code == 2, result.err
    assert "two installed distributions register the scorer 'contains'" in result.err
    assert "entry point `contains = nspec.runners.grading.text:CONTAINS` of needlespec" in result.err
    assert "entry point `contains = rival:ALWAYS` of rival-scorers 0.1" in result.err
    assert "Traceback" not in result.err


@pytest.mark.parametrize("command", ["validate", "plan", "compile"])
def test_a_scorer_s_metric_that_fails_to_import_or_is_not_installed_is_refused(
    site, monkeypatch, cli, spec_file, command
):
    install(
        site,
        monkeypatch,
        "metric-of-its-own",
        {"own_scorer": scorer_module(metric="lowest"), "own_metric": "import not_installed_anywhere\n"},
        {"nspec.scorers": {"always": "own_scorer:ALWAYS"}, "nspec.metrics": {"lowest": "own_metric:LOWEST"}},
    )
    result = cli(command, spec_file(SPEC + "scoring: [{always: true}]\n"))
    assert result.code == 2, result.err
    assert (
        "scoring[0].always: the metric 'lowest' (entry point `lowest = own_metric:LOWEST` of metric-of-its-own 0.1) "
        "failed to load: ModuleNotFoundError" in result.err
    )
    assert "Traceback" not in result.err


def test_a_scorer_declaring_a_metric_nobody_registers_is_refused(site, monkeypatch, cli, spec_file):
    install(
        site,
        monkeypatch,
        "lonely",
        {"lonely": scorer_module(metric="median")},
        {"nspec.scorers": {"always": "lonely:ALWAYS"}},
    )
    result = cli("validate", spec_file(SPEC + "scoring: [{always: true}]\n"))
    assert result.code == 2
    assert (
        "declares the metric 'median', which is not installed: the installed metrics are f1, judge_score, mean_score"
        in result.err
    )


def test_a_metric_named_like_a_built_in_is_refused_naming_both(site, monkeypatch, cli, spec_file):
    metric = """
from nspec.scorers import Metric


class Rate(Metric):
    name = "pass_rate"
    label = "rate"
    percent = True

    def start(self):
        return None


RATE = Rate()
"""
    install(
        site,
        monkeypatch,
        "rival-metrics",
        {"rival_scorer": scorer_module(), "rival_metric": metric},
        {"nspec.scorers": {"always": "rival_scorer:ALWAYS"}, "nspec.metrics": {"pass_rate": "rival_metric:RATE"}},
    )
    result = cli("validate", spec_file(SPEC + "scoring: [{always: true}]\n"))
    assert result.code == 2
    assert "two installed distributions register the metric 'pass_rate'" in result.err
    assert "entry point `pass_rate = rival_metric:RATE` of rival-metrics 0.1" in result.err


def test_an_unknown_scorer_lists_the_installed_ones(cli, spec_file):
    result = cli("validate", spec_file(SPEC + "scoring: [{contain: '{answer}'}]\n"))
    assert result.code == 2
    assert (
        "scoring[0].contain: unknown scorer 'contain'; did you mean 'contains'? (the installed scorers are all_of, "
        "auto, contains, exact, number, rails, regex, ruler, sequence_ratio, set_f1, string_match_all, "
        "string_match_part; or `judge`)" in result.err
    )
