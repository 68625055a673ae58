"""needlespec: long-context retrieval benchmarks as YAML specs, compiled into provider batch files.

`nspec.grade(answer, expected=[...], question=..., needle=...)` grades one answer exactly as `nspec score` does;
see its docstring, and docs/scoring.md for the cascade it runs.

This module is the top of the layers (docs/architecture.md): it re-exports the runners' grader (and its `Verdict`, from
`nspec.scorers`), so nothing inside the package imports `nspec` itself; they import the module they need
(`nspec.version` for the version).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nspec.version import __version__

if TYPE_CHECKING:
    from nspec.runners.grading.grader import grade
    from nspec.scorers import Verdict

__all__ = ["Verdict", "__version__", "grade"]


def __getattr__(name: str) -> Any:
    # Imported on first use: `import nspec` (and the CLI's start-up) stays light.
    if name == "grade":
        from nspec.runners.grading.grader import grade

        return grade
    if name == "Verdict":
        from nspec.scorers import Verdict

        return Verdict
    raise AttributeError(f"module 'nspec' has no attribute {name!r}")
