"""What every check of a spec works with: the merged spec, where each value stands in its files, and the issues
found so far. Every check runs on the merged spec even when the schema found errors, so one `nspec validate` reports
everything; a check therefore looks only at values of the expected type and skips the rest (the schema reports
those), and computes only with values the schema passed (`valid`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nspec.compiler.tasks import Family
from nspec.errors import SpecIssue
from nspec.inputs import Confinement
from nspec.spec.yamlsource import Path, SourceMap, format_path
from nspec.templates import TemplateError, placeholders


class SpecChecker:
    """The merged spec ``data`` with its source map; collects `SpecIssue`s, each located at its key path. A task
    family's own checks report through it (it is their `SpecChecks`)."""

    def __init__(
        self,
        data: dict[str, Any],
        source: SourceMap,
        base_dir: str,
        schema_issues: list[SpecIssue],
        confinement: Confinement | None,
        top_file: str | None,
    ) -> None:
        self.data = data
        self.source = source
        self.base_dir = base_dir
        self.issues: list[SpecIssue] = []
        self.invalid = {issue.path for issue in schema_issues}
        self.confinement = confinement
        self.top_file = top_file
        self.family: Family | None = None  # the spec's task family, once known

    def valid(self, path: Path) -> bool:
        """Whether the schema found nothing wrong at or under ``path``: values there have their declared types
        and ranges, so a rule may compute with them (expanding a range of a billion steps, say, it may not)."""
        name = format_path(path)
        return not any(bad == name or bad.startswith((name + ".", name + "[")) for bad in self.invalid)

    def error(self, path: Path, message: str, *, at_key: bool = False) -> None:
        loc = self.source.key(path) if at_key else self.source.value(path)
        self.issues.append(SpecIssue(loc, format_path(path), message))

    def template(self, path: Path, text: Any, allowed: set[str], what: str) -> dict[str, int] | None:
        """Check one template: parsable, every placeholder allowed. Returns the placeholder counts."""
        if not isinstance(text, str):
            return None
        try:
            found = placeholders(text)
        except TemplateError as exc:
            self.error(path, str(exc))
            return None
        for name in sorted(set(found) - allowed):
            hint = f"; {what} may use {braced(allowed)}" if allowed else f"; {what} takes no placeholders"
            self.error(path, f"unknown placeholder {{{name}}}{hint}")
        return dict(found)

    def prompt_entries(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        """The prompt, or each prompt variant, with its path."""
        prompt = self.data.get("prompt")
        if isinstance(prompt, dict):
            yield ("prompt",), prompt
        prompts = self.data.get("prompts")
        if isinstance(prompts, list):
            for i, variant in enumerate(prompts):
                if isinstance(variant, dict):
                    yield ("prompts", i), variant

    def prompt_overrides(self) -> list[tuple[Path, dict[str, Any]]]:
        """Each model's prompt override, with its path."""
        return [((*p, "prompt"), m["prompt"]) for p, m in self.model_entries() if isinstance(m.get("prompt"), dict)]

    def model_entries(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        models = self.data.get("models")
        if isinstance(models, list):
            for i, model in enumerate(models):
                if isinstance(model, dict):
                    yield ("models", i), model

    def reserves(self) -> Iterator[tuple[Path, int]]:
        """Every reserve_tokens that applies to some cell, with the path that sets it."""
        seen = set()
        for path, entry in [*self.prompt_entries(), *((p, m.get("prompt")) for p, m in self.model_entries())]:
            if isinstance(entry, dict):
                reserve = entry.get("reserve_tokens", 300 if path[0] != "models" else None)
                if isinstance(reserve, int) and reserve not in seen:
                    seen.add(reserve)
                    yield (*path, "reserve_tokens"), reserve

    def model_reserves(self, model: dict[str, Any]) -> list[int]:
        """The reserve_tokens its cells get: its own prompt override's, else every prompt variant's."""
        override = model.get("prompt")
        if isinstance(override, dict) and isinstance(override.get("reserve_tokens"), int):
            return [override["reserve_tokens"]]
        return [
            e.get("reserve_tokens", 300)
            for _, e in self.prompt_entries()
            if isinstance(e.get("reserve_tokens", 300), int)
        ]


def braced(names: set[str]) -> str:
    return ", ".join("{" + n + "}" for n in sorted(names))


def short(values: list[Any]) -> str:
    shown = ", ".join(str(v) for v in values[:5])
    return shown + (f" and {len(values) - 5} more" if len(values) > 5 else "")
