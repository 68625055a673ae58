"""The prompt or its variants: one of the two, names unique, templates with the placeholders each field takes,
the haystack once in the user template, the question shown to the model."""

from __future__ import annotations

from typing import Any

from nspec.spec.yamlsource import Path, format_path
from nspec.templates import TemplateError, placeholders

from .base import SpecChecker

PROMPT_FIELDS = ("system", "user", "question_message", "prefill")


def check_prompts(c: SpecChecker) -> None:
    has_one, has_many = "prompt" in c.data, "prompts" in c.data
    if has_one and has_many:
        c.error(("prompts",), "give either `prompt` or `prompts`, not both", at_key=True)
    elif not has_one and not has_many and (c.family is None or c.family.needs_haystack):
        c.error((), "missing `prompt` (or `prompts`, a list of named variants): how cells are put to models")
    names: dict[str, Path] = {}
    for path, entry in c.prompt_entries():
        name = entry.get("name")
        if isinstance(name, str):
            if name in names:
                c.error((*path, "name"), f"prompt variant {name!r} is defined twice")
            names[name] = path
    overrides = c.prompt_overrides()
    for path, entry in [*c.prompt_entries(), *overrides]:
        for field in PROMPT_FIELDS:
            allowed = {"haystack", "question"} if field == "user" else {"question"}
            c.template((*path, field), entry.get(field), allowed, f"`{field}`")
        _haystack_once(c, path, entry.get("user"))
    for path, entry in c.prompt_entries():
        _question_shown(c, path, entry)
        for override_path, override in overrides:
            _question_shown(c, override_path, {**entry, **override}, variant=path)


def _haystack_once(c: SpecChecker, path: Path, user: Any) -> None:
    if not isinstance(user, str):
        return
    try:
        count = placeholders(user).get("haystack", 0)
    except TemplateError:
        return  # reported by prompt_templates
    if count != 1:
        where = (*path, "user")
        c.error(where, f"the user template must contain {{haystack}} exactly once (found {count})")


def _question_shown(c: SpecChecker, path: Path, entry: dict[str, Any], variant: Path | None = None) -> None:
    if not isinstance(entry.get("user"), str):
        return  # the schema reports the missing user template
    for field in PROMPT_FIELDS:
        text = entry.get(field)
        if isinstance(text, str):
            try:
                if "question" in placeholders(text):
                    return
            except TemplateError:
                return
    suffix = f" (with prompt {format_path(variant)})" if variant else ""
    c.error(path, f"the question is never shown to the model: put {{question}} in `user`{suffix}")
