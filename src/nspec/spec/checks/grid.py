"""The grid: ranges that expand, lengths with room for the prompt and within every model's max_context."""

from __future__ import annotations

from collections import Counter

from nspec.compiler import grid as grid_axes
from nspec.compiler.providers.registry import provider
from nspec.errors import UserError
from nspec.spec.yamlsource import format_path

from .base import SpecChecker, short


def check_grid(c: SpecChecker) -> None:
    grid = c.data.get("grid")
    if not isinstance(grid, dict):
        return
    for key, expand in (("context_lengths", grid_axes.context_lengths), ("depths", grid_axes.depths)):
        axis = grid.get(key)
        if isinstance(axis, dict) and c.valid(("grid", key)):
            start, stop, steps = axis.get("from", 0), axis.get("to", 100), axis.get("steps")
            if not all(isinstance(v, int | float) for v in (start, stop, steps)):
                continue
            if start > stop:
                c.error(("grid", key), f"`from` ({start}) is greater than `to` ({stop})")
                continue
            dups = sorted(v for v, n in Counter(expand(axis)).items() if n > 1)
            if dups:
                c.error(("grid", key), f"the range gives duplicate values ({short(dups)}): use fewer steps")
    lengths = grid.get("context_lengths")
    if isinstance(lengths, dict | list) and c.valid(("grid", "context_lengths")):
        try:
            values = grid_axes.context_lengths(lengths)
        except (KeyError, TypeError, ValueError):
            return
        if not all(isinstance(v, int) for v in values):
            return
        for path, reserve in c.reserves():
            too_small = [v for v in values if 0 < v <= reserve]  # non-positive ones: the schema says
            if too_small:
                c.error(
                    ("grid", "context_lengths"),
                    f"context length {short(too_small)} leaves no room for the prompt: it must exceed "
                    f"reserve_tokens ({reserve}, {format_path(path)})",
                )
        _beyond_max_context(c, values)


def _beyond_max_context(c: SpecChecker, lengths: list[int]) -> None:
    """A length past a model's max_context, or past the context window its provider knows where it sets none (a local
    model's trained context), is compile's refusal under `run.on_too_long: error` (the default): said here, at the
    model's max_context or its id."""
    run = c.data.get("run")
    if isinstance(run, dict) and run.get("on_too_long", "error") != "error":
        return
    for path, model in c.model_entries():
        given = model.get("max_context")
        if isinstance(given, int) and not isinstance(given, bool) and c.valid((*path, "max_context")):
            limit, where, what = given, "max_context", f"max_context ({given})"
        elif given is None and (window := _context_window(model)) is not None:
            limit, where, what = window, "id", f"context window ({window:,}, as its provider knows it)"
        else:
            continue
        over = [v for v in lengths if v > limit]
        if over:
            c.error(
                (*path, where),
                f"context length {short(over)} exceeds the model's {what}; shorten grid.context_lengths or set "
                "run.on_too_long: drop",
            )


def _context_window(model: dict[str, object]) -> int | None:
    """The context window the provider of a model entry knows, if any (an entry it refuses is said elsewhere)."""
    model_id = model.get("id")
    if not isinstance(model_id, str) or "/" not in model_id:
        return None
    try:
        return provider(model_id.split("/", 1)[0]).context_window(model)
    except UserError:
        return None
