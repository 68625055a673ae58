"""What compile refuses of a valid spec once its family makes its tasks and drafts, said where the spec sets it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nspec.compiler.compilation import Compilation, Mode
from nspec.compiler.haystack import load_haystack
from nspec.compiler.tasks import ParamError, registry
from nspec.errors import CompileError, SpecError, SpecIssue, UserError
from nspec.inputs import Confinement
from nspec.spec.yamlsource import Path, SourceMap, format_path


def family_fit(
    spec: dict[str, Any],
    written: Mapping[str, Any],
    source: SourceMap,
    base_dir: str,
    confinement: Confinement | None,
    compiles_next: bool = False,
) -> list[SpecIssue]:
    """What compile refuses of a valid, resolved spec once its family makes its tasks and drafts, made as compile
    makes them: a task at each point of `grid.params` (a parameter it cannot use as given, a `ParamError`, located
    at the parameter as the spec ``written`` gives it: `task.params`, or its value in `grid.params`), then the first
    trial's drafts at the shortest length, where a context that cannot fit fails first (located at
    `grid.context_lengths`), as `Compilation.check` finds it, and the first trial at the longest length; a caller that
    compiles next (``compiles_next``) leaves to its compile what it makes anyway (`Compilation.check`)."""
    family = registry.family(registry.named(spec))
    task = spec.get("task")
    at: Path = ("task", "params") if isinstance(task, dict) and "params" in task else ("task",)
    try:
        haystack = load_haystack(spec["haystack"], base_dir, confinement) if family.needs_haystack else None
        compilation = Compilation(spec, haystack, Mode.VALIDATE, None, None, base_dir, confinement)
    except SpecError as exc:
        return exc.issues
    except ParamError as exc:
        swept = registry.sweeps(spec)
        key = exc.key[0] if exc.key else None
        if key in exc.point:
            where: Path = ("grid", "params", key, swept[key].index(exc.point[key]))
        else:
            where = (*at, *exc.key) if key in written else at
        return [SpecIssue(source.value(where), format_path(where), str(exc))]
    except UserError as exc:
        return [SpecIssue(source.value(at), format_path(at), str(exc))]
    try:
        compilation.check(compiles_next)
    except CompileError as exc:
        return [lengths_issue(source, str(exc))]
    return []


def lengths_issue(source: SourceMap, message: str) -> SpecIssue:
    """A cell that cannot be made at its length, said where the lengths are set: `grid.context_lengths`."""
    return SpecIssue(source.value(("grid", "context_lengths")), "grid.context_lengths", message)
