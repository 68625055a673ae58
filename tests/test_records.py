"""The typed run-directory contract: nspec.records and the JSON Schemas name the same fields, the schemas refuse
what they do not know, and the one JSONL reader and writer behave (stable bytes, atomic writes, streamed reads)."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from nspec import jsonl, records
from tests.contract import problems, schema

GOLDEN = Path(__file__).parent / "golden"

PAIRS = [
    (records.CellRecord, "cell"),
    (records.ResultRecord, "result"),
    (records.ScoreRecord, "score"),
    (records.Manifest, "manifest"),
]


def _typed_dict_of(hint: Any) -> Any:
    """The TypedDict a field holds (directly, in a list, or optionally), if any."""
    if is_typeddict(hint):
        return hint
    if get_origin(hint) in (list, typing.Union, types.UnionType):
        for arg in get_args(hint):
            found = _typed_dict_of(arg)
            if found is not None:
                return found
    return None


def _compare(kind: Any, node: dict[str, Any], where: str) -> list[str]:
    hints = get_type_hints(kind)
    out = []
    if set(hints) != set(node["properties"]):
        out.append(f"{where}: {kind.__name__} has {sorted(hints)}, the schema {sorted(node['properties'])}")
    if set(kind.__required_keys__) != set(node.get("required", [])):
        out.append(f"{where}: required {sorted(kind.__required_keys__)} vs {sorted(node.get('required', []))}")
    if node.get("additionalProperties") is not False:
        out.append(f"{where}: the schema must refuse unknown fields")
    for field, hint in hints.items():
        inner = _typed_dict_of(hint)
        if inner is not None and field in node["properties"]:
            sub = node["properties"][field]
            out += _compare(inner, sub.get("items", sub), f"{where}.{field}")
    return out


@pytest.mark.parametrize(("kind", "name"), PAIRS, ids=[n for _, n in PAIRS])
def test_the_types_and_the_schemas_name_the_same_fields(kind, name):
    assert _compare(kind, schema(name), name) == []


def test_the_schemas_refuse_a_field_they_do_not_know_and_a_missing_one(tmp_path):
    cell = next(jsonl.read(GOLDEN / "noise" / "cells.jsonl"))
    bad = tmp_path / "cells.jsonl"
    jsonl.write(bad, [{**cell, "surprise": 1}, {k: v for k, v in cell.items() if k != "question"}])
    found = problems(bad, "cell")
    assert any("cells.jsonl:1" in p and "surprise" in p for p in found)
    assert any("cells.jsonl:2" in p and "question" in p for p in found)


def test_jsonl_lines_are_stable_and_written_whole(tmp_path):
    assert jsonl.encode({"b": "é", "a": [1, None]}) == '{"b":"é","a":[1,null]}\n'.encode()
    assert jsonl.encode({"n": 2**64}) == jsonl.dumps({"n": 2**64}) + b"\n" == b'{"n":18446744073709551616}\n'
    path = tmp_path / "x.jsonl"
    jsonl.write(path, ({"n": n} for n in range(3)))
    assert [r["n"] for r in jsonl.read(path)] == [0, 1, 2]
    assert [(offset, raw) for offset, _, raw in jsonl.read_raw(path)] == [
        (0, b'{"n":0}\n'),
        (8, b'{"n":1}\n'),
        (16, b'{"n":2}\n'),
    ]
    assert not list(tmp_path.glob("*.part"))

    def failing():
        yield {"n": 9}
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        jsonl.write(path, failing())
    assert [r["n"] for r in jsonl.read(path)] == [0, 1, 2]  # the old file stands until the new one is whole
    assert not list(tmp_path.glob("*.part"))  # and the half-written one is gone
    assert list(jsonl.read(tmp_path / "absent.jsonl")) == []


def test_a_shard_request_is_read_again_by_its_offset_and_only_as_its_own(tmp_path):
    from nspec.errors import UserError
    from nspec.runners.run_store import located_shard_requests, shard_request_at

    shard = tmp_path / "shard.jsonl"
    shard.write_bytes(b'{"custom_id":"a","body":{"n":1}}\n\n{"custom_id":"b","body":{"n":2}}\n')
    located = list(located_shard_requests(shard))
    assert [(at.offset, cid) for at, cid, _ in located] == [(0, "a"), (34, "b")]  # the blank line counted
    assert all(shard_request_at(shard, at, cid) == line for at, cid, line in located)
    (a, _, _), (b, _, _) = located
    shard.write_bytes(b'{"custom_id":"a","body":{"n":7}}\n\n{"custom_id":"b","body":{"n":2}}\n')  # in place
    with pytest.raises(UserError, match="byte 0 no longer starts a's line as it was read"):
        shard_request_at(shard, a, "a")
    assert shard_request_at(shard, b, "b") == located[1][2]
    shard.write_bytes(b'{"custom_id":"b","body":{"n":2}}\n')  # lines moved
    with pytest.raises(UserError, match="changed while its requests were sent"):
        shard_request_at(shard, b, "b")
    with pytest.raises(UserError, match="byte 0 no longer starts a's line"):
        shard_request_at(shard, a, "a")


def test_a_line_being_appended_is_left_out_and_a_damaged_one_is_named(tmp_path):
    from nspec.errors import UserError

    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"cell_id": "a"}\n{"cell_id": "b", "te')  # another process is writing "b"
    assert [r["cell_id"] for r in jsonl.read(path)] == ["a"]
    path.write_bytes(b'{"cell_id": "a"}\n{"cell_id": \n{"cell_id": "c"}\n')
    with pytest.raises(UserError, match=r"results.jsonl:2: not a JSON line; the file is damaged"):
        list(jsonl.read(path))
    path.write_bytes(b'{"cell_id": "a"}\n\n{"cell_id": "\xff"}')  # cut inside a character: being appended too
    assert [r["cell_id"] for r in jsonl.read(path)] == ["a"]
    path.write_bytes(b'{"cell_id": "a"}\n\n{"cell_id": "\xff"}\n')  # whole, but not UTF-8; blank lines counted
    with pytest.raises(UserError, match=r"results.jsonl:3: not a JSON line; the file is damaged"):
        list(jsonl.read(path))


def test_a_damaged_request_shard_line_is_named(tmp_path):
    """A request shard is read whole before it is sent: a line cut off or damaged there is the file's fault, named
    with its line, not a crash."""
    from nspec.errors import UserError

    path = tmp_path / "shard.jsonl"
    path.write_bytes(b'{"custom_id": "a"}\n\n{"custom_id": "b", "bo')  # cut off
    with pytest.raises(UserError, match=r"shard.jsonl:3: not a JSON line; the file is damaged"):
        list(jsonl.read_raw(path))
    path.write_bytes(b'{"custom_id": "a"}\n{"custom_id": "\x01"}\n{"custom_id": "c"}\n')
    with pytest.raises(UserError, match=r"shard.jsonl:2: not a JSON line; the file is damaged"):
        list(jsonl.read_raw(path))
    from nspec.runners.run_store import located_shard_requests, shard_lines

    for line in (b"5", b'{"body": {}}', b'{"custom_id": 7}'):  # JSON, but no request line
        path.write_bytes(b'{"custom_id": "a"}\n' + line + b"\n")
        for read in (shard_lines, located_shard_requests):
            with pytest.raises(UserError, match=r"shard.jsonl: byte 19 starts no request line \(no custom_id\)"):
                list(read(path))


def test_a_line_index_finds_records_by_cell_id_through_hash_collisions_and_torn_lines(tmp_path):
    from nspec.runners.run_store import LineIndex

    # "plumless" and "buckeroo" share a CRC-32: the index must tell them apart by reading the lines.
    path = tmp_path / "results.jsonl"
    lines = [
        jsonl.encode({"cell_id": "plumless", "text": "first"}),
        jsonl.encode({"cell_id": "buckeroo", "text": "other"}),
        b'{"text": "written by hand", "cell_id": "loose"}\n',  # not in nspec's order: parsed whole
        b"not json\n",
        jsonl.encode({"cell_id": "plumless", "text": "again"}),
        b'{"cell_id":"torn","text":"still being wr',
    ]
    path.write_bytes(b"".join(lines))
    with LineIndex(path) as index:
        assert len(index) == 4
        assert index.get("plumless")["text"] == "again"  # the last line with the id wins
        assert index.get("buckeroo")["text"] == "other"
        assert index.get("loose")["text"] == "written by hand"
        assert index.get("torn") is None and index.get("absent") is None
    with LineIndex(tmp_path / "none.jsonl") as empty:
        assert len(empty) == 0 and empty.get("plumless") is None
