"""Which task families exist: the built-ins, and those of installed packages through the `nspec.tasks` entry-point
group (as providers come through the `nspec.providers` group). A spec names a family; it never names code: a spec
from someone else's repository runs only what is installed here.

A package registers a family with an entry point that loads an instance of a `Family` subclass (nspec's own are
registered so in its pyproject.toml):

    [project.entry-points."nspec.tasks"]
    counting = "my_package.counting:FAMILY"
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nspec.plugins import Registry

from .family import Family, family_problem

FAMILIES: Registry[Family] = Registry("nspec.tasks", "task family", "task families", family_problem)


def names() -> list[str]:
    """Every family a spec may name."""
    return FAMILIES.names()


def family(name: str) -> Family:
    """The family registered as ``name``, loaded on first use; an unknown name is a user error naming the known."""
    return FAMILIES.get(name)


def named(spec: Mapping[str, Any]) -> str:
    """The family a resolved spec runs: its `task`, else `stack` for a stack haystack and `needle` otherwise."""
    task = spec.get("task")
    if isinstance(task, str):
        return task
    if isinstance(task, Mapping):
        return str(task["name"])
    haystack = spec.get("haystack")
    return "stack" if isinstance(haystack, Mapping) and "stack" in haystack else "needle"


def params_of(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The family's parameters a spec gives (`task.params`), before any `grid.params` sweep."""
    task = spec.get("task")
    params = task.get("params", {}) if isinstance(task, Mapping) else {}
    return dict(params) if isinstance(params, Mapping) else {}


def sweeps(spec: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The parameters `grid.params` sweeps, each a list of values (each one an axis of the report)."""
    grid = spec.get("grid")
    swept = grid.get("params", {}) if isinstance(grid, Mapping) else {}
    return {str(k): list(v) for k, v in swept.items()} if isinstance(swept, Mapping) else {}


def points(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every point of the `grid.params` sweeps (their product, in the order the spec lists them); one empty point
    when there are none."""
    out: list[dict[str, Any]] = [{}]
    for key, values in sweeps(spec).items():
        out = [{**point, key: value} for point in out for value in values]
    return out
