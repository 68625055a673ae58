"""The spec's task family: installed, its parameters valid, the sections it reads given and the others not, and
its own checks of them (`Family.check`)."""

from __future__ import annotations

from nspec.compiler.tasks import FAMILY_SECTIONS, Family, registry
from nspec.errors import UserError
from nspec.spec.schema import params_issues
from nspec.spec.yamlsource import Path, format_path

from .base import SpecChecker


def check_task(c: SpecChecker) -> None:
    """The task family: installed, its parameters valid against its schema (each value `grid.params` sweeps
    too), the sections it reads present, those it does not read absent, and its own checks of them."""
    task = c.data.get("task")
    if not c.valid(("task",)):
        return
    name = registry.named(c.data)
    try:
        family = registry.family(name)
    except UserError as exc:
        c.error(("task", "name") if isinstance(task, dict) else ("task",), str(exc))
        return
    c.family = family
    schema = family.params_schema
    given = task.get("params", {}) if isinstance(task, dict) else {}
    grid = c.data.get("grid")
    swept = grid.get("params") if isinstance(grid, dict) and c.valid(("grid", "params")) else None
    swept = swept if isinstance(swept, dict) else {}
    known = schema.get("properties", {})
    closed = schema.get("additionalProperties") is False
    checked = {}
    for key, values in swept.items():
        if closed and key not in known:
            hint = f"; its parameters are {', '.join(sorted(known))}" if known else "; it takes none"
            c.error(("grid", "params", key), f"unknown parameter {key!r} of the {name} task family{hint}", at_key=True)
            continue
        checked[key] = values
        for i, value in enumerate(values if key in known else ()):
            c.issues += params_issues(value, known[key], c.source, ("grid", "params", key, i))
    # The parameters with each sweep at its first value: what is required, and every parameter not swept.
    whole = {**given, **{k: v[0] for k, v in checked.items()}}
    at: Path = ("task", "params") if isinstance(task, dict) and "params" in task else ("task",)
    c.issues += [
        issue
        for issue in params_issues(whole, schema, c.source, at)
        if not any(issue.path.startswith(format_path((*at, k))) for k in checked)
    ]
    _family_sections(c, family)
    if family.needs_haystack:
        _haystack_sections(c, family)
    else:
        _no_haystack_sections(c, family)
    family.check(c.data, c)


def _family_sections(c: SpecChecker, family: Family) -> None:
    """A section of the spec that belongs to a family (`FAMILY_SECTIONS`) is given only where the family reads it."""
    for keys in FAMILY_SECTIONS:
        parent = c.data.get(str(keys[0])) if len(keys) > 1 else c.data
        if isinstance(parent, dict) and keys[-1] in parent and keys not in family.sections:
            c.error(keys, f"`{keys[-1]}` does not apply to the {family.name} task family: remove it", at_key=True)


def _haystack_sections(c: SpecChecker, family: Family) -> None:
    """What a family that fills a haystack needs: the haystack, of the kind it reads, its depths, a prompt with a
    user template."""
    if "haystack" not in c.data:
        c.error((), "missing required key 'haystack' at the top of the spec", at_key=True)
    grid = c.data.get("grid")
    if isinstance(grid, dict) and "depths" not in grid:
        c.error(("grid",), "missing required key 'depths' in `grid`", at_key=True)
    for path, entry in c.prompt_entries():
        if "user" not in entry:
            c.error(path, f"missing required key 'user' in `{format_path(path)}`", at_key=True)
    haystack = c.data.get("haystack")
    if not isinstance(haystack, dict):
        return
    kind = "stack" if "stack" in haystack else "text"
    if kind != family.haystack_kind:
        wanted = (
            "a `stack` haystack (haystack: {stack: ...})"
            if family.haystack_kind == "stack"
            else ("a text haystack (corpus, files or noise), not a `stack`")
        )
        c.error(("task",) if "task" in c.data else ("haystack",), f"the {family.name} task family reads {wanted}")


def _no_haystack_sections(c: SpecChecker, family: Family) -> None:
    """A family that generates its contexts or brings them whole reads no haystack, and writes the user turn."""
    for keys in (("haystack",), ("grid", "depths")):
        parent = c.data.get(keys[0]) if len(keys) > 1 else c.data
        if isinstance(parent, dict) and keys[-1] in parent:
            c.error(
                keys,
                f"`{keys[-1]}` does not apply to the {family.name} task family (it reads no haystack): remove it",
                at_key=True,
            )
    for path, entry in [*c.prompt_entries(), *c.prompt_overrides()]:
        for key in ("user", "question_message", "prefill"):
            if key in entry:
                c.error(
                    (*path, key),
                    f"the {family.name} task family writes the user turn and its answer prefix: `prompt` takes "
                    "`system` and `reserve_tokens` here",
                    at_key=True,
                )
