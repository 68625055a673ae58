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
