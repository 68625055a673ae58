"""A spec from someone else's repository can read only what that repository holds and cannot send a key anywhere it
should not go: files under the spec's root (its git work tree, else its folder) unless --allow-path says otherwise,
symlinks resolved first; `base_url` and `api_key_env` only in the spec you run; a provider's standard key only to
that provider or to this machine; and every destination said before anything is sent."""

from __future__ import annotations

import os

import pytest

from nspec.compiler.providers.credentials import credentials
from nspec.errors import UserError
from tests.conftest import BASE


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git work tree (its `.git` marks the root) with a spec in a subfolder, and a folder outside it."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "specs").mkdir()
    (root / "shared").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret.txt").write_text("The launch code is 0000. " * 400)
    monkeypatch.chdir(root / "specs")
    return root


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_includes_and_haystacks_inside_the_work_tree_are_read(repo, cli):
    write(repo / "shared" / "base.yaml", "seed: 3\n")
    (repo / "shared" / "hay.txt").write_text("A quiet sentence here. " * 400)
    spec = BASE.replace("{corpus: austen}", "{files: ../shared/hay.txt}")
    result = cli("validate", write(repo / "specs" / "spec.yaml", "include: ../shared/base.yaml\n" + spec))
    assert result.code == 0, result.err


def test_without_a_work_tree_the_root_is_the_spec_folder(tmp_path, cli, monkeypatch):
    (tmp_path / "specs").mkdir()
    write(tmp_path / "part.yaml", "seed: 3\n")
    monkeypatch.chdir(tmp_path / "specs")
    result = cli("validate", write(tmp_path / "specs" / "spec.yaml", "include: ../part.yaml\n" + BASE))
    assert result.code == 2 and "include: ../part.yaml lies outside the spec's root" in result.err


@pytest.mark.parametrize(
    "change, path",
    [
        (lambda s: "include: ../../elsewhere/part.yaml\n" + s, "include"),
        (lambda s: s.replace("{corpus: austen}", "{files: ../../elsewhere/secret.txt}"), "haystack.files"),
        (lambda s: s.replace("{corpus: austen}", "{files: /etc/passwd}"), "haystack.files"),
        (lambda s: s.replace("{corpus: austen}", "{files: '../../elsewhere/*'}"), "haystack.files"),
    ],
    ids=["include", "haystack file", "absolute path", "glob"],
)
def test_files_outside_the_root_are_refused_unread(repo, tmp_path, cli, change, path):
    write(tmp_path / "elsewhere" / "part.yaml", "seed: 3\n")
    spec = write(repo / "specs" / "spec.yaml", change(BASE))
    for command in ("validate", "plan", "compile"):
        result = cli(command, spec)
        assert result.code == 2, result.err
        assert f"{path}: " in result.err and "lies outside the spec's root" in result.err
        assert "--allow-path" in result.err and "launch code" not in result.err


def test_a_symlink_out_of_the_root_is_followed_before_the_check(repo, tmp_path, cli):
    os.symlink(tmp_path / "elsewhere" / "secret.txt", repo / "specs" / "hay.txt")
    spec = write(repo / "specs" / "spec.yaml", BASE.replace("{corpus: austen}", "{files: hay.txt}"))
    result = cli("validate", spec)
    assert result.code == 2
    assert f"'hay.txt' lies outside the spec's root {repo} (through a symbolic link)" in result.err
    assert "elsewhere" not in result.err  # where it leads is not said
    out = str(tmp_path / "out")
    allowed = cli("compile", spec, "--allow-path", str(tmp_path / "elsewhere"), "-o", out)
    assert allowed.code == 0, allowed.err  # the user said so


@pytest.mark.parametrize("key", ["base_url", "api_key_env"])
def test_an_included_file_cannot_say_where_requests_and_keys_go(repo, cli, key):
    value = "http://127.0.0.1:9/v1" if key == "base_url" else "SOME_TOKEN"
    write(repo / "shared" / "defaults.yaml", f"defaults: {{{key}: '{value}'}}\n")
    spec = write(repo / "specs" / "spec.yaml", "include: ../shared/defaults.yaml\n" + BASE)
    result = cli("validate", spec)
    assert result.code == 2
    assert f"models[0].{key}: `{key}` may be set only in the spec you run ({spec}), not by an included file" in (
        result.err
    )
    top = write(
        repo / "specs" / "top.yaml", BASE.replace("openai/gpt-4.1-mini}", f"openai/gpt-4.1-mini, {key}: '{value}'}}")
    )
    assert cli("validate", top).code == 0  # the same setting in the spec itself


@pytest.mark.parametrize(
    "url, ok",
    [
        ("https://api.openai.com/v1", True),
        ("http://127.0.0.1:8765/v1", True),
        ("http://localhost:8000/v1", True),
        ("http://[::1]:8000/v1", True),
        ("https://collector.example.net/v1", False),
        ("http://169.254.169.254/latest", False),
    ],
)
def test_a_standard_key_goes_only_to_its_provider_or_this_machine(spec_file, cli, monkeypatch, url, ok):
    spec = spec_file(BASE.replace("openai/gpt-4.1-mini}", f"openai/gpt-4.1-mini, base_url: '{url}'}}"))
    result = cli("validate", spec)
    if ok:
        assert result.code == 0, result.err
        return
    assert result.code == 2
    host = url.split("/")[2]
    assert f"base_url sends requests to {host}, which is not openai's API (api.openai.com) nor this machine" in (
        result.err
    )
    assert "name the key meant for" in result.err
    named = spec_file(BASE.replace("openai/gpt-4.1-mini}", f"openai/gpt-4.1-mini, base_url: '{url}', api_key_env: K}}"))
    assert cli("validate", named).code == 0  # an explicit key for that host, in the spec you run
    monkeypatch.setenv("OPENAI_API_KEY", "sk-standard")  # and at send time too, whatever the spec file says
    with pytest.raises(UserError, match="is not sent there"):
        credentials({"id": "openai/gpt-4.1-mini", "base_url": url})


def test_plan_and_run_say_every_destination_first(spec_file, cli, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    judge = "scoring:\n  - judge: {models: [{id: anthropic/claude-haiku-4-5, base_url: 'http://127.0.0.1:9'}]}\n"
    spec = spec_file(BASE + judge)
    planned = cli("plan", spec)
    assert "sends to: openai/gpt-4.1-mini → api.openai.com (NSPEC_OPENAI_API_KEY or OPENAI_API_KEY)" in planned.out
    assert "sends to: anthropic/claude-haiku-4-5 → 127.0.0.1:9 (NSPEC_ANTHROPIC_API_KEY or ANTHROPIC_API_KEY)" in (
        planned.out
    )
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("NSPEC_OPENAI_API_KEY", raising=False)
    ran = cli("run", spec, "-o", str(tmp_path / "out"))
    assert ran.code == 2  # no key: nothing is sent, but where it would go is said first
    assert ran.out.splitlines()[0].startswith("sends to: openai/gpt-4.1-mini → api.openai.com")
