"""The run directory's layout (DESIGN §3), defined once: every file a stage reads or writes is named here; and the
one folder nspec keeps outside run directories, the user's cache."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

STAGES = ("answers", "judge")


@dataclass(frozen=True)
class RunPaths:
    """The files of the run directory at ``root``."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def spec(self) -> Path:
        return self.root / "spec.yaml"

    @property
    def cells(self) -> Path:
        return self.root / "cells.jsonl"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.sqlite"

    @property
    def scores(self) -> Path:
        return self.root / "scores.jsonl"

    @property
    def scoring_override(self) -> Path:
        """The scoring section `nspec rescore` grades with, when it changed the spec's."""
        return self.root / "scoring.yaml"

    @property
    def lock(self) -> Path:
        """Held (flock) by the one process working in the run directory; it holds that process's id."""
        return self.root / "lock"

    @property
    def report(self) -> Path:
        return self.root / "report"

    def requests(self, stage: str) -> Path:
        """The folder of a stage's request shards."""
        return self.root / stage / "requests"

    def results(self, stage: str) -> Path:
        return self.root / stage / "results.jsonl"

    def downloads(self, stage: str) -> Path:
        """Where a stage's batch outputs land while they are parsed."""
        return self.root / stage / "downloads"

    def stage_manifest(self, stage: str) -> Path:
        """The manifest of a stage compiled after the answers (the judges')."""
        return self.root / stage / "manifest.json"


def file_in_the_way(folder: Path) -> Path | None:
    """What stands, not a folder (a file, a broken link), where ``folder`` or one of its parents must be, so that
    ``folder`` cannot be made; None if nothing does."""
    for part in (folder, *folder.parents):
        if os.path.lexists(part):
            return None if part.is_dir() else part
    return None


def cache_dir() -> Path:
    """nspec's cache folder (the local model's file, the report's script bundle): `NSPEC_CACHE_DIR`, else
    `$XDG_CACHE_HOME/nspec`, else `~/.cache/nspec`."""
    if os.environ.get("NSPEC_CACHE_DIR"):
        return Path(os.environ["NSPEC_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nspec"
