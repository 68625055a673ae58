"""Loading a spec: read the file and its includes, merge them, validate, and resolve defaults.

The result is the resolved spec: one plain mapping with no `include:` or `defaults:` left, every default filled in,
and paths of files rewritten relative to the root spec's folder, so it can be written out and re-validated as is.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

from nspec.compiler.counts_file import COUNTS_SUFFIX, CountsFile
from nspec.compiler.json_input import DataError, Source, decode
from nspec.compiler.judge_prompts import judge_prompt
from nspec.compiler.providers.registry import provider
from nspec.compiler.tasks import registry
from nspec.datasets import is_reference
from nspec.errors import CellError, Location, SpecError, SpecIssue, UserError
from nspec.inputs import Confinement, read_input
from nspec.spec import checks
from nspec.spec.schema import fill_defaults, schema_issues
from nspec.spec.yamlsource import Document, Path, SourceMap, format_path, read_document

# Keys of the spec's own holding paths relative to the file that writes them (rewritten where an included file
# writes them); a task family declares its own (`Family.path_params`).
_PATH_KEYS: tuple[Path, ...] = (
    ("haystack", "files"),
    ("haystack", "stack", "items"),
    ("haystack", "stack", "questions"),
)


@dataclass
class LoadedSpec:
    """A validated, resolved spec."""

    file: str  # the root spec file, as the user named it
    data: dict[str, Any]  # the resolved spec
    source: SourceMap  # where each value came from (files and includes)
    files: list[str] = field(default_factory=list)  # every file read, root first
    warnings: list[SpecIssue] = field(default_factory=list)  # valid, but probably not what was meant
    confinement: Confinement | None = None  # the folders its files may lie in (None: anywhere)
    counts: CountsFile | None = None  # its providers' token counts (`nspec calibrate`), when it has some

    @property
    def base_dir(self) -> str:
        """The folder that relative paths in the resolved spec start from."""
        return os.path.dirname(self.file) or "."


@contextmanager
def located_cells(loaded: LoadedSpec) -> Iterator[None]:
    """A cell that compile, plan or calibrate cannot make at its length, refused as validate refuses what it finds
    of the same kind (it builds the first trial only): located at `grid.context_lengths`."""
    try:
        yield
    except CellError as exc:
        raise SpecError([checks.lengths_issue(loaded.source, str(exc))]) from None


def load_spec(file: str, allowed: Sequence[str] = (), compiles_next: bool = False) -> LoadedSpec:
    """Load, merge, validate and resolve the spec at ``file``; raises SpecError with every issue found. The files
    it names (includes, haystack and stack files) must lie under its root or a folder in ``allowed``
    (`nspec.inputs.Confinement`). What compile would refuse is found by building the first trial's cells at the
    shortest and longest lengths (`Compilation.check`); a caller that compiles the spec next (``compiles_next``)
    leaves to its compile the cells it would make anyway: the longest length's where a haystack is read, found
    before any work (`Compilation.check_longest`) with the haystack read once, and every cell of a generated context
    (located alike by `located_cells`)."""
    confinement = Confinement.of(file, allowed)
    files: list[str] = []
    doc = _load_with_includes(file, chain=(), files=files, confinement=confinement)
    data, source = doc.data, doc.source
    _rebase_paths(data, source, file)
    issues = schema_issues(data, source)
    inherited = _merge_model_defaults(data, source)
    _leave_out_refused(inherited)
    issues += checks.check(data, source, os.path.dirname(file) or ".", issues, confinement, file)
    if issues:
        raise SpecError(issues)
    _imply_judge_rubric(data)
    resolved = fill_defaults(data)
    if "task" in data and "scoring" not in data:  # the family's own scorers (RULER's metrics, say)
        resolved["scoring"] = [dict(e) for e in registry.family(registry.named(resolved)).default_scoring]
    written = registry.params_of(data)
    fit = checks.family_fit(resolved, written, source, os.path.dirname(file) or ".", confinement, compiles_next)
    if fit:
        raise SpecError(fit)
    counts = load_counts(file)
    return LoadedSpec(file, resolved, source, files, checks.warnings(data, source), confinement, counts)


COUNTS_LIMIT = 1 << 30  # bytes: a million cells' counts fit many times over


def counts_file(spec_file: str) -> str:
    """Where a spec's provider token counts are kept: beside it, `<spec name>.counts.json`."""
    return os.path.splitext(spec_file)[0] + COUNTS_SUFFIX


@functools.cache
def _counts_validator() -> Draft202012Validator:
    schema = json.loads(resources.files("nspec.schemas").joinpath("counts.v1.json").read_text("utf-8"))
    return Draft202012Validator(schema)


def load_counts(spec_file: str) -> CountsFile | None:
    """The counts file beside ``spec_file``, checked against schemas/counts.v1.json; None when there is none."""
    path = counts_file(spec_file)
    if not os.path.lexists(path):
        return None
    try:
        document = decode(Source(path, read_input(path, COUNTS_LIMIT)))
        errors = sorted(_counts_validator().iter_errors(document.value), key=lambda e: list(map(str, e.absolute_path)))
        refusals = [document.error(e.message[:300], tuple(e.absolute_path)) for e in errors[:20]]
    except DataError as exc:
        refusals = [exc]
    if refusals:  # each at the value it names
        raise SpecError(
            [
                SpecIssue(Location(path, r.line, r.column or 1), r.field, f"{r.reason}: rerun nspec calibrate")
                for r in refusals
            ]
        )
    return CountsFile.from_dict(document.value)


def _load_with_includes(file: str, chain: tuple[str, ...], files: list[str], confinement: Confinement) -> Document:
    doc = read_document(file)
    files.append(file)
    if not isinstance(doc.data, dict):
        raise SpecError(
            [
                SpecIssue(
                    doc.source.value(()),
                    "",
                    f"a spec is a mapping of keys (nspec: 1, name: ...), not {type(doc.data).__name__}",
                )
            ]
        )
    include = doc.data.pop("include", None)
    if include is None:
        return doc
    entries: list[tuple[Path, Any]] = (
        [(("include",), include)]
        if not isinstance(include, list)
        else [(("include", i), item) for i, item in enumerate(include)]
    )
    merged: Document | None = None
    issues: list[SpecIssue] = []
    here = os.path.dirname(file)
    for path, target in entries:
        loc = doc.source.value(path)
        if not isinstance(target, str) or not target:
            issues.append(SpecIssue(loc, format_path(path), "must be a file path (text)"))
            continue
        outside = confinement.problem(os.path.join(here, target))
        if outside is not None:
            shown = target.replace("\0", "\\0")
            issues.append(SpecIssue(loc, format_path(path), f"{shown} {outside}"))
            continue
        target_file = os.path.normpath(os.path.join(here, target))
        if os.path.realpath(target_file) in {os.path.realpath(f) for f in (*chain, file)}:
            cycle = " → ".join((*chain, file, target_file))
            issues.append(SpecIssue(loc, format_path(path), f"include cycle: {cycle}"))
            continue
        if not os.path.exists(target_file):
            issues.append(SpecIssue(loc, format_path(path), f"included file not found: {target_file}"))
            continue
        try:
            included = _load_with_includes(target_file, (*chain, file), files, confinement)
        except SpecError as exc:
            issues += [_via(issue, loc) if issue.location.file != file else issue for issue in exc.issues]
            continue
        merged = included if merged is None else _merge(merged, included)
    if issues:
        raise SpecError(issues)
    return doc if merged is None else _merge(merged, doc)


def _via(issue: SpecIssue, include_at: Location) -> SpecIssue:
    if "(included from" in issue.message:
        return issue
    return SpecIssue(issue.location, issue.path, f"{issue.message} (included from {include_at})")


def _rebase_paths(data: dict[str, Any], source: SourceMap, root: str) -> None:
    """Rewrite every file path an included file wrote so that it is relative to the folder of the ``root`` spec, as
    the paths it writes itself are: the spec's own path keys (`_PATH_KEYS`) and its family's path parameters
    (`Family.path_params`, but the names of what it ships), in `task.params` and in a `grid.params` sweep alike.
    Which file wrote a value is where the source map places it, so a family named in one file and its parameters
    set in another are read as written."""
    to_dir = os.path.dirname(root)
    for container, key, path in _path_places(data):
        written, value = source.value(path).file, container[key]
        if isinstance(value, str) and written != root and not is_reference(value):  # a data set is no folder's
            container[key] = os.path.relpath(os.path.join(os.path.dirname(written), value), to_dir or ".")


Place = tuple[Any, str | int, Path]  # a value's container, its key there, and its path in the spec


def _path_places(data: dict[str, Any]) -> list[Place]:
    """Where the spec holds file paths: its own path keys and its family's path parameters."""
    places: list[Place] = []

    def add(container: Any, key: str | int, path: Path) -> None:
        value = container[key]
        if isinstance(value, list):
            places.extend((value, i, (*path, i)) for i in range(len(value)))
        else:
            places.append((container, key, path))

    for keys in _PATH_KEYS:
        parent: Any = data
        for key in keys[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and keys[-1] in parent:
            add(parent, keys[-1], keys)
    try:
        family = registry.family(registry.named(data))
    except UserError:
        return places  # an unknown family: the checks say so
    for section in ("task", "grid"):
        parent = data.get(section)
        params = parent.get("params") if isinstance(parent, dict) else None
        if isinstance(params, dict):
            for name in family.path_params:
                if name in params:
                    add(params, name, (section, "params", name))
    shipped = family.built_in_names
    return [(c, k, p) for c, k, p in places if p[0] == "haystack" or (isinstance(c[k], str) and c[k] not in shipped)]


def _merge(base: Document, top: Document) -> Document:
    """Deep merge: mappings merge key by key; anything else in ``top`` replaces ``base``."""
    source = SourceMap()
    source.update(base.source)
    source.update(top.source)
    return Document(top.file, _merge_values(base.data, top.data), source)


def _merge_values(base: Any, top: Any) -> Any:
    if isinstance(base, dict) and isinstance(top, dict):
        out = dict(base)
        for key, value in top.items():
            out[key] = _merge_values(base[key], value) if key in base else value
        return out
    return top


def _imply_judge_rubric(data: dict[str, Any]) -> None:
    """Write the rubric a judge's preset prompt implies into its entry (before the schema's default could)."""
    for scorer in data.get("scoring") or []:
        judge = scorer.get("judge")
        if isinstance(judge, dict) and "rubric" not in judge:
            implied = judge_prompt(judge.get("prompt")).rubric
            if implied is not None:
                judge["rubric"] = implied


def _merge_model_defaults(data: dict[str, Any], source: SourceMap) -> list[tuple[dict[str, Any], list[str]]]:
    """Merge `defaults:` into every model and judge model (the model's own settings win), then drop it.
    Judge models given as bare ids become entries, so they take the defaults too. Returns each merged entry with
    the params it took from the defaults."""
    defaults = data.pop("defaults", None)
    targets: list[tuple[Path, list[Any]]] = []
    if isinstance(data.get("models"), list):
        targets.append((("models",), data["models"]))
    scoring = data.get("scoring")
    for i, scorer in enumerate(scoring if isinstance(scoring, list) else []):
        judge = scorer.get("judge") if isinstance(scorer, dict) else None
        if isinstance(judge, dict) and isinstance(judge.get("models"), list):
            judge["models"] = [{"id": m} if isinstance(m, str) else m for m in judge["models"]]
            targets.append((("scoring", i, "judge", "models"), judge["models"]))
    if not isinstance(defaults, dict):
        return []
    given = defaults.get("params")
    inherited: list[tuple[dict[str, Any], list[str]]] = []
    # Where each default stands, found once (the source map holds every value of the spec).
    located = [
        (table, [(path[1:], loc) for path, loc in table.items() if path[:1] == ("defaults",) and len(path) > 1])
        for table in (source.values, source.keys, source.raw)
    ]
    for list_path, models in targets:
        for j, model in enumerate(models):
            if not isinstance(model, dict):
                continue
            models[j] = _merge_values(copy.deepcopy(defaults), model)
            own = model.get("params")
            if isinstance(given, dict) and isinstance(own, dict | None):
                inherited.append((models[j], [k for k in given if k not in (own or {})]))
            prefix = (*list_path, j)
            for table, entries in located:
                for rest, loc in entries:
                    table.setdefault((*prefix, *rest), loc)  # type: ignore[arg-type]
    return inherited


def _leave_out_refused(inherited: list[tuple[dict[str, Any], list[str]]]) -> None:
    """A param `defaults:` gives to several models goes only to those whose API takes it: for the others it is set to
    null (not sent; the plan says why, `Provider.refused_params`). One that no model takes stays, and `validate`
    refuses it there, with why."""
    refused: dict[str, list[dict[str, Any]]] = {}
    takers: set[str] = set()
    for entry, keys in inherited:
        model_id = entry.get("id")
        if not keys or not isinstance(model_id, str) or "/" not in model_id:
            continue
        try:
            api = provider(model_id.split("/", 1)[0])
        except UserError:
            continue  # an unknown provider: the checks say so
        why = api.refused_params(entry)
        for key in keys:
            if entry["params"].get(key) is None:
                continue
            if key in why:
                refused.setdefault(key, []).append(entry)
            else:
                takers.add(key)
    for key, entries in refused.items():
        if key in takers:
            for entry in entries:
                entry["params"][key] = None
