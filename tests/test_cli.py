import json
import subprocess
import sys
from pathlib import Path

import pytest

from nspec import __version__
from nspec.cli import app
from tests.conftest import BASE, SPECS, shipped_specs

EXAMPLES = shipped_specs()


def test_version(cli):
    result = cli("--version")
    assert result.code == 0
    assert result.out.strip() == f"nspec {__version__}"


@pytest.mark.parametrize("command", [None, *sorted(c.name or c.callback.__name__ for c in app.registered_commands)])
def test_every_command_has_help(cli, command):
    result = cli(*([command] if command else []), "--help")
    assert result.code == 0
    assert "Usage:" in result.out


def test_examples_are_valid(cli):
    assert len(EXAMPLES) >= 5
    result = cli("validate", *map(str, EXAMPLES))
    assert result.code == 0, result.err
    assert result.out.count(": valid") == len(EXAMPLES)


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: p.name)
def test_examples_declare_the_schema_for_editors(spec):
    assert spec.read_text().startswith("# yaml-language-server: $schema=../schemas/spec.v1.json\n")


def test_schema_command_prints_an_existing_schema(cli):
    result = cli("schema")
    assert result.code == 0
    path = Path(result.out.strip())
    assert path.name == "spec.v1.json" and json.loads(path.read_text())["$schema"].endswith("2020-12/schema")


def test_validate_reports_all_files_and_exits_2(cli, spec_file):
    good = spec_file(BASE, "good.yaml")
    bad = spec_file(BASE.replace("seed", "x").replace("name: t", "name: t\nsede: 3"), "bad.yaml")
    result = cli("validate", good, bad)
    assert result.code == 2
    assert "good.yaml: valid" in result.out
    assert result.lines[0] == "bad.yaml:3:1: sede: unknown key 'sede'; did you mean 'seed'?"
    assert result.lines[-1] == "1 error in 1 of 2 files"


def test_validate_json(cli, spec_file):
    bad = spec_file(BASE.replace("depths: [50]", "depths: [150]"))
    result = cli("validate", "--json", bad)
    assert result.code == 2
    payload = json.loads(result.out)
    assert payload["valid"] is False
    assert payload["files"] == [
        {
            "file": bad,
            "valid": False,
            "errors": [
                {
                    "file": bad,
                    "line": 9,
                    "column": 42,
                    "path": "grid.depths[0]",
                    "message": "must be at most 100 (got 150)",
                }
            ],
            "warnings": [],
        }
    ]


def test_validate_json_valid(cli, spec_file):
    result = cli("validate", "--json", spec_file(BASE))
    assert result.code == 0
    assert json.loads(result.out) == {
        "valid": True,
        "files": [{"file": "spec.yaml", "valid": True, "errors": [], "warnings": []}],
    }


def test_usage_error_exits_2(cli):
    assert cli("validate").code == 2
    assert cli("no-such-command").code == 2


def test_console_script_end_to_end(tmp_path):
    """The installed entry point, in a real process: exit codes and no traceback."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("nspec: 1\nname: [x]\n")
    proc = subprocess.run([sys.executable, "-m", "nspec", "validate", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"{bad}:2:7: name: must be text, not a list" in proc.stderr
    ok = subprocess.run(
        [sys.executable, "-m", "nspec", "validate", str(SPECS / "quickstart.yaml")],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr


def test_providers_lists_every_lane_and_never_a_key(cli, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.delenv("NSPEC_OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("NSPEC_ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    result = cli("providers", "--json")
    assert result.code == 0
    rows = {row["provider"]: row for row in json.loads(result.out)}
    assert set(rows) >= {"openai", "openai-compatible", "anthropic", "local"}
    assert rows["openai"]["lanes"] == ["batch", "live"] and rows["openai"]["key_set"] == "OPENAI_API_KEY"
    assert rows["openai"]["token_counts"].startswith("exact")
    assert rows["anthropic"]["key_set"] is None and rows["anthropic"]["token_counts"].startswith("estimated")
    assert rows["openai-compatible"]["lanes"] == ["batch (with batch_api: true)", "live"]
    assert rows["local"]["lanes"] == ["local"] and rows["local"]["key_variables"] == []
    table = cli("providers")
    assert table.code == 0 and "OPENAI_API_KEY (set)" in table.out
    assert "sk-secret-value" not in table.out + result.out
