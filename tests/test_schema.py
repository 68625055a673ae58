"""The schema itself: valid draft 2020-12, strict, and documented everywhere."""

import re

from jsonschema import Draft202012Validator

from nspec.compiler import lists
from nspec.scorers import SCORERS
from nspec.spec.schema import _deref, editor_schema, schema_path, schema_text, spec_schema
from tests.conftest import ROOT


def walk_properties(schema, path="", seen=None):
    """Yield (path, property schema) for every property the schema declares, following $refs."""
    seen = set() if seen is None else seen
    schema = _deref(schema)
    key = id(schema)
    for name, sub in schema.get("properties", {}).items():
        yield f"{path}.{name}", sub
        yield from walk_properties(sub, f"{path}.{name}", seen)
    for keyword in ("items", "additionalProperties"):
        if isinstance(schema.get(keyword), dict):
            yield from walk_properties(schema[keyword], f"{path}[]", seen)
    for keyword in ("oneOf", "anyOf"):
        for branch in schema.get(keyword, []):
            if key not in seen:
                yield from walk_properties(branch, path, seen)
    seen.add(key)


def test_schema_is_valid_2020_12():
    Draft202012Validator.check_schema(spec_schema())


def test_every_property_has_a_description():
    undocumented = [p for p, sub in walk_properties(spec_schema()) if not _deref(sub).get("description")]
    assert undocumented == []


def test_every_object_refuses_unknown_keys():
    def objects(schema, path=""):
        schema = _deref(schema)
        if schema.get("type") == "object" and "properties" in schema:
            yield path, schema
        for name, sub in schema.get("properties", {}).items():
            yield from objects(sub, f"{path}.{name}")
        for keyword in ("items",):
            if isinstance(schema.get(keyword), dict):
                yield from objects(schema[keyword], f"{path}[]")
        for keyword in ("oneOf", "anyOf"):
            for branch in schema.get(keyword, []):
                yield from objects(branch, path)

    open_objects = [p for p, s in objects(spec_schema()) if s.get("additionalProperties") is not False]
    assert open_objects == []


def test_builtin_list_names_match_the_shipped_lists():
    choice = spec_schema()["$defs"]["variable"]["properties"]["choice"]["oneOf"][0]["enum"]
    assert choice == lists.names()
    assert all(len(lists.load(name)) >= 40 for name in choice)


def test_docs_mention_every_key():
    """Every key of the schema appears in the guide, as `key` in prose or as `key:` in an example."""
    doc = (ROOT / "docs" / "writing-specs.md").read_text()
    mentioned = set(re.findall(r"`([a-z0-9_]+)`", doc)) | set(re.findall(r"\b([a-z0-9_]+):", doc))
    keys = {p.rsplit(".", 1)[-1] for p, _ in walk_properties(spec_schema())}
    assert sorted(keys - mentioned) == []


def test_the_shipped_schema_s_scorers_are_the_installed_scorers_declarations():
    """spec.v1.json is written by `nspec schema --write` from the installed scorers (nspec's own here): a scorer's
    options changed in its declaration and not in the file fail here."""
    assert schema_path().read_text("utf-8") == schema_text(editor_schema(SCORERS.all()))
    shipped = spec_schema()["$defs"]["scorer"]["properties"]
    assert sorted(shipped) == sorted([*SCORERS.names(), "judge"])
