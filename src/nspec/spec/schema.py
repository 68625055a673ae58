"""The spec's JSON Schema: where it is, validation with located messages, and filling in its defaults.

The schema's scorers are the installed ones (`nspec.scorers`): each scorer declares the schema of its options. The
shipped file, spec.v1.json, is for editors: its `$defs.scorer` is generated from the scorers installed when it was
written (`editor_schema`; `nspec schema --write`), and a test keeps it equal to what nspec's own give. A spec is
validated against the same schema with that part open (`$defs.scorer` takes any one key), and each scoring entry
against its own scorer's options (`nspec.spec.checks.scorers`), so that a scorer only matters to specs that name it.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path as FsPath
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from nspec.errors import SpecIssue
from nspec.scorers import JUDGE, SCORERS, Scorer
from nspec.spec.yamlsource import Path, SourceMap, explain_scalar, format_path

SCHEMA_FILE = "spec.v1.json"

_TYPE_NAMES = {
    "string": "text",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping (key: value)",
    "null": "nothing",
}


def schema_path() -> FsPath:
    """The installed schema file (for editors: `# yaml-language-server: $schema=<path>`)."""
    return FsPath(str(resources.files("nspec.schemas").joinpath(SCHEMA_FILE)))


@functools.cache
def spec_schema() -> dict[str, Any]:
    """The shipped schema, for editors."""
    schema: dict[str, Any] = json.loads(resources.files("nspec.schemas").joinpath(SCHEMA_FILE).read_text("utf-8"))
    return schema


def editor_schema(scorers: Mapping[str, Scorer]) -> dict[str, Any]:
    """The spec schema with ``scorers`` (name to scorer: the installed ones, `SCORERS.all()`) as its scorers, each
    with the schema of its options, beside the judge: what editors read (spec.v1.json ships it for nspec's own)."""
    listed: dict[str, Any] = {name: dict(scorers[name].options_schema) for name in sorted(scorers)}
    scorer = {
        "description": "One scorer: an object with exactly one key naming its kind.",
        "type": "object",
        "additionalProperties": False,
        "minProperties": 1,
        "maxProperties": 1,
        "properties": {**listed, JUDGE: {"$ref": "#/$defs/judge"}},
    }
    return {**spec_schema(), "$defs": {**spec_schema()["$defs"], "scorer": scorer}}


def schema_text(schema: Mapping[str, Any]) -> str:
    """A schema as the shipped file writes it."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


@functools.cache
def _checked_schema() -> dict[str, Any]:
    """What a spec is validated against: the shipped schema with a scoring entry open to any one scorer (the judge's
    entry checked here, a scorer's by its own schema: `nspec.spec.checks.scorers`)."""
    shipped = spec_schema()
    entry = {
        "description": shipped["$defs"]["scorer"]["description"],
        "type": "object",
        "properties": {JUDGE: {"$ref": "#/$defs/judge"}},
    }
    scoring = {**shipped["properties"]["scoring"], "items": entry}
    return {**shipped, "properties": {**shipped["properties"], "scoring": scoring}}


@functools.cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(_checked_schema())


def schema_issues(data: Any, source: SourceMap) -> list[SpecIssue]:
    """Every schema violation in ``data``, located through ``source``."""
    issues: list[SpecIssue] = []
    for error in _validator().iter_errors(data):
        issues.extend(_translate(error, source))
    unique = {(i.location, i.path, i.message): i for i in issues}
    return list(unique.values())


def params_issues(data: Any, schema: Mapping[str, Any], source: SourceMap, at: Path) -> list[SpecIssue]:
    """Every violation of ``schema`` (a task family's parameters, or one of them) in ``data``, which stands at
    ``at`` in the spec: located like the spec's own. A family's schema is self-contained (no `$ref`)."""
    issues: list[SpecIssue] = []
    for error in Draft202012Validator(schema).iter_errors(data):
        issues.extend(_translate(error, source, at))
    return list({(i.location, i.path, i.message): i for i in issues}.values())


def _translate(error: ValidationError, source: SourceMap, prefix: Path = ()) -> list[SpecIssue]:
    path: Path = (*prefix, *error.absolute_path)
    kind, value, schema = error.validator, error.instance, error.schema

    def at(message: str, where: Path = path, key: bool = False) -> SpecIssue:
        return SpecIssue(source.key(where) if key else source.value(where), format_path(where), message)

    if kind == "additionalProperties" and isinstance(value, dict):
        known = sorted(schema.get("properties", {}))
        out = []
        for name in sorted(set(value) - set(known)):
            out.append(at(f"unknown key {name!r}{_did_you_mean(name, known, known_list=True)}", (*path, name), True))
        return out
    if kind == "required" and isinstance(value, dict):
        missing = [k for k in error.validator_value if k not in value]
        where = "at the top of the spec" if not path else f"in `{format_path(path)}`"
        return [at(f"missing required key {k!r} {where}", key=True) for k in missing]
    if kind in ("oneOf", "anyOf"):
        return _translate_choice(error, source, path, at, prefix)
    if kind == "type":
        return [at(_type_message(error.validator_value, value, source.raw.get(path)))]
    if kind == "const":
        return [at(f"must be {json.dumps(error.validator_value)}{_got(value, source, path)}")]
    if kind == "enum":
        options = [str(o) for o in error.validator_value]
        hint = _did_you_mean(str(value), options) if isinstance(value, str) else ""
        return [at(f"must be one of: {', '.join(options)}{_got(value, source, path)}{hint}")]
    if kind == "pattern":
        return [at(f"{value!r} is not allowed here: {schema.get('patternErrorMessage', 'see the schema')}")]
    if kind in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        word = {
            "minimum": "at least",
            "exclusiveMinimum": "more than",
            "maximum": "at most",
            "exclusiveMaximum": "less than",
        }[kind]
        return [at(f"must be {word} {error.validator_value} (got {value})")]
    if kind == "minItems":
        return [
            at("must not be empty" if error.validator_value == 1 else f"needs at least {error.validator_value} items")
        ]
    if kind == "uniqueItems":
        return [at("has the same value twice")]
    if kind == "minProperties":
        return [at("must not be empty")]
    if kind == "maxProperties" and isinstance(value, dict):
        kinds = ", ".join(sorted(schema.get("properties", {})))
        return [at(f"has {len(value)} keys ({', '.join(value)}) but takes exactly one of: {kinds}")]
    if kind == "propertyNames":
        return [
            at(
                f"{value!r} is not a valid name: use letters, digits and _, not starting with a digit",
                key=True,
            )
        ]
    if kind == "minLength":
        return [at("must not be empty")]
    return [at(error.message)]


def _translate_choice(
    error: ValidationError, source: SourceMap, path: Path, at: Any, prefix: Path = ()
) -> list[SpecIssue]:
    """oneOf/anyOf: either "exactly one of these keys", or the errors of the branch the value was meant for."""
    branches: list[dict[str, Any]] = error.validator_value
    value = error.instance
    keyed = [b["required"][0] for b in branches if list(b) == ["required"] and len(b["required"]) == 1]
    if len(keyed) == len(branches) and isinstance(value, dict):
        present = [k for k in keyed if k in value]
        if not present:
            return [at(f"needs one of: {', '.join(keyed)}")]
        return [at(f"takes only one of {', '.join(keyed)}, but has {' and '.join(present)}")]
    # The branch whose top-level type fits the value is the one the user meant; report what went wrong inside it.
    by_branch: dict[int, list[ValidationError]] = {}
    for sub in error.context or []:
        by_branch.setdefault(int(sub.relative_schema_path[0]), []).append(sub)
    fitting = [
        errs
        for i, errs in sorted(by_branch.items())
        if not any(
            e.validator in ("type", "const", "enum") and not e.relative_path and len(e.relative_schema_path) <= 2
            for e in errs
        )
        and _type_fits(branches[i], value)
    ]
    if len(fitting) == 1:
        out: list[SpecIssue] = []
        for sub in fitting[0]:
            out.extend(_translate(sub, source, prefix))
        return out
    expected = " or ".join(_describe(b) for b in branches)
    return [at(f"must be {expected}{_got(value, source, path)}{_explain(value, source, path)}")]


def _type_fits(branch: dict[str, Any], value: Any) -> bool:
    branch = _deref(branch)
    want = branch.get("type")
    if want is None:
        return "const" not in branch and "enum" not in branch
    return _is_type(value, want)


def _is_type(value: Any, want: str) -> bool:
    return bool(_validator().is_type(value, want))


def _deref(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema and schema["$ref"].startswith("#/"):
        target: Any = spec_schema()
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _describe(branch: dict[str, Any]) -> str:
    branch = _deref(branch)
    if "const" in branch:
        return json.dumps(branch["const"])
    if "enum" in branch:
        return "one of " + ", ".join(str(v) for v in branch["enum"])
    if branch.get("type") == "array":
        return "a list"
    return _TYPE_NAMES.get(branch.get("type", ""), "a value of another form")


def _type_message(expected: str | list[str], value: Any, raw: str | None) -> str:
    names = [expected] if isinstance(expected, str) else expected
    want = " or ".join(_TYPE_NAMES.get(n, n) for n in names)
    hint = explain_scalar(value, raw, for_text="string" in names)
    return f"must be {want}, not {_kind_of(value)}" + (f"; {hint}" if hint else "")


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if value is None:
        return "nothing (null)"
    return "a date" if type(value).__name__ == "YamlDate" else type(value).__name__


def _got(value: Any, source: SourceMap, path: Path) -> str:
    shown = source.raw.get(path, json.dumps(value) if isinstance(value, str | int | float | bool) else None)
    return f" (got {shown})" if shown is not None and not isinstance(value, dict | list) else ""


def _explain(value: Any, source: SourceMap, path: Path) -> str:
    hint = explain_scalar(value, source.raw.get(path))
    return f"; {hint}" if hint else ""


def _did_you_mean(name: str, options: list[str], known_list: bool = False) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; allowed keys: {', '.join(options)}" if known_list and options else ""


def fill_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of a valid spec with every absent property that has a schema default set to it, at any depth: its
    scorers' options by their own schemas."""
    filled: dict[str, Any] = _filled(data, _checked_schema())
    if isinstance(filled.get("scoring"), list):
        filled["scoring"] = [
            entry if JUDGE in entry else {kind: _filled(options, SCORERS.get(kind).options_schema)}
            for entry in filled["scoring"]
            for kind, options in entry.items()
        ]
    return filled


def _filled(data: Any, schema: Mapping[str, Any]) -> Any:
    schema = _deref(dict(schema))
    for key in ("oneOf", "anyOf"):
        for branch in schema.get(key, []):
            branch = _deref(branch)
            if "type" in branch and _is_type(data, branch["type"]):
                return _filled(data, branch)
    if isinstance(data, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        out = {}
        for name, sub in props.items():
            sub = _deref(sub)
            if name in data:
                out[name] = _filled(data[name], sub)
            elif "default" in sub:
                out[name] = json.loads(json.dumps(sub["default"]))
        for name, value in data.items():
            if name not in props:
                out[name] = _filled(value, extra) if isinstance(extra, dict) else value
        return out
    if isinstance(data, list) and isinstance(schema.get("items"), dict):
        return [_filled(item, schema["items"]) for item in data]
    return data
