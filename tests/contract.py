"""The run-directory contract, checked: every line of cells, results and scores, and the manifest, against the JSON
Schemas shipped in nspec.schemas."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from nspec import jsonl
from nspec.run_layout import STAGES, RunPaths


def schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(resources.files("nspec.schemas").joinpath(f"{name}.v1.json").read_text("utf-8"))
    return loaded


def problems(path: Path, name: str) -> list[str]:
    """Where the records of ``path`` (one JSON document, or JSON Lines) break schema ``name``."""
    validator = jsonschema.Draft202012Validator(schema(name))
    records = [json.loads(path.read_text("utf-8"))] if path.suffix == ".json" else list(jsonl.read(path))
    assert records, f"{path} is empty"
    return [
        f"{path.name}:{number}: {'/'.join(map(str, error.absolute_path))}: {error.message}"
        for number, record in enumerate(records, 1)
        for error in validator.iter_errors(record)
    ]


def assert_run_valid(root: Path) -> None:
    """Every contract file the run directory holds validates."""
    paths = RunPaths(root)
    files = [(paths.manifest, "manifest"), (paths.cells, "cell")]
    files += [(paths.results(stage), "result") for stage in STAGES if paths.results(stage).is_file()]
    if paths.scores.is_file():
        files.append((paths.scores, "score"))
    found = [p for path, name in files for p in problems(path, name)]
    assert not found, "\n".join(found[:20])
