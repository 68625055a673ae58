"""needlespec: long-context retrieval benchmarks as YAML specs, compiled into provider batch files.

`nspec.grade(answer, expected=[...], question=..., needle=...)` grades one answer exactly as `nspec score` does;
see its docstring, and docs/scoring.md for the cascade it runs.

This module is the top of the layers (docs/architecture.md): it re-exports the runners' grader, so nothing inside
the package imports `nspec` itself; they import the module they need (`nspec.version` for the version).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nspec.version import __version__

if TYPE_CHECKING:
    from nspec.runners.grading.grader import Verdict, grade

__all__ = ["Verdict", "__version__", "grade"]


def __getattr__(name: str) -> Any:
    # Imported on first use: `import nspec` (and the CLI's start-up) stays light.
    if name in ("grade", "Verdict"):
        from nspec.runners.grading import grader

        return getattr(grader, name)
    raise AttributeError(f"module 'nspec' has no attribute {name!r}")
