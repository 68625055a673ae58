"""Golden files: small specs of each haystack kind compile to exactly these bytes.

After an intended change of the output, regenerate them with NSPEC_UPDATE_GOLDEN=1 and review the diff.
"""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from nspec.compiler.run_writer import compile_run
from nspec.spec import load_spec
from tests.conftest import ROOT, shipped_grid, shipped_specs
from tests.contract import assert_run_valid

GOLDEN = Path(__file__).parent / "golden"
SPECS = sorted((GOLDEN / "specs").glob("*.yaml"))


def run_files(run: Path) -> dict[str, bytes]:
    files = {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    manifest = json.loads(files["manifest.json"])
    del manifest["provenance"]  # where the spec was compiled from, not what it compiled to
    files["manifest.json"] = (json.dumps(manifest, indent=2) + "\n").encode()
    return files


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_golden(spec, tmp_path, monkeypatch):
    monkeypatch.chdir(spec.parent)
    loaded = load_spec(spec.name)
    run = compile_run(loaded.data, loaded.base_dir, tmp_path, {"file": spec.name}).path
    assert_run_valid(run)  # the manifest and every cell line meet their schemas
    got = run_files(run)
    expected_dir = GOLDEN / spec.stem
    if os.environ.get("NSPEC_UPDATE_GOLDEN"):
        shutil.rmtree(expected_dir, ignore_errors=True)
        for name, data in got.items():
            (expected_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (expected_dir / name).write_bytes(data)
    expected = {
        str(p.relative_to(expected_dir)): p.read_bytes() for p in sorted(expected_dir.rglob("*")) if p.is_file()
    }
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert got[name] == expected[name], f"{spec.stem}/{name} differs from the golden file"


SHIPPED = GOLDEN / "shipped.json"  # digests of each shipped spec's cells and request files


def compiled_digests(run: Path) -> dict[str, str]:
    """SHA-256 of a run directory's cells and request files: what providers are sent and what grading reads."""
    files = [run / "cells.jsonl", *sorted((run / "answers" / "requests").glob("*.jsonl"))]
    return {str(f.relative_to(run)): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


@pytest.mark.parametrize("spec", shipped_specs(), ids=lambda p: p.stem)
def test_shipped_specs_compile_to_recorded_digests(spec, tmp_path, monkeypatch):
    """Every shipped spec (a large grid cut as the default run takes it, its data sets the tests' stand-ins) compiles
    to the bytes recorded: the cells and request files of every family and haystack kind the project ships, from
    1K to 128K tokens, stay byte-identical across changes of how they are made."""
    monkeypatch.chdir(ROOT)
    loaded = load_spec(f"specs/{spec.name}")
    data = shipped_grid(spec.name, loaded.data)
    got = compiled_digests(compile_run(data, loaded.base_dir, tmp_path, {"file": spec.name}).path)
    recorded = json.loads(SHIPPED.read_text()) if SHIPPED.is_file() else {}
    if os.environ.get("NSPEC_UPDATE_GOLDEN"):
        recorded[spec.stem] = got
        SHIPPED.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    assert got == recorded[spec.stem]
