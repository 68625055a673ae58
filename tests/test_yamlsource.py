"""Reading YAML: plain values only, located, nothing constructed by the YAML library."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nspec.errors import SpecError
from nspec.spec import load_spec
from nspec.spec.yamlsource import YamlDate, parse_document


def parse(text: str):
    return parse_document(text.encode(), "x.yaml")


def messages(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse(text)
    return [str(i) for i in info.value.issues]


def test_plain_values_and_locations():
    doc = parse("a: 1\nb: [x, 'y', 2.5, true, null, 0x1F, 1_000]\nc: {d: yes}\n")
    assert doc.data == {
        "a": 1,
        "b": ["x", "y", 2.5, True, None, 31, 1000],
        "c": {"d": "yes"},
    }  # YAML 1.2: yes is text
    assert (doc.source.values[("b", 2)].line, doc.source.values[("b", 2)].column) == (2, 13)
    assert (doc.source.keys[("c", "d")].line, doc.source.keys[("c", "d")].column) == (3, 5)
    assert doc.source.raw[("b", 2)] == "2.5"


def test_dates_stay_text_but_are_marked():
    assert parse("d: 2024-01-01\n").data == {"d": YamlDate("2024-01-01")}


def test_aliases_are_expanded():
    assert parse("a: &x {k: 1}\nb: *x\n").data == {"a": {"k": 1}, "b": {"k": 1}}


def test_alias_bomb_is_refused():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i, name in enumerate("bcdefgh"):
        prev = "abcdefgh"[i]
        bomb += f"{name}: &{name} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
    (msg,) = messages(bomb)
    assert "expands to more than 200,000 values (aliases?)" in msg


def test_an_alias_bomb_is_refused_where_building_would_pass_the_limit():
    """Counted on the node graph (each shared node once), the refusal names the value the builder would have
    reached, without building a fifth of a million values first."""
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    assert messages(bomb) == [
        "x.yaml:1:23: g[0][0][0][1][2][0][5]: the document expands to more than 200,000 values (aliases?)"
    ]
    shared = parse("a: &a [1, 2]\nb: [*a, *a, *a]\n").data  # shared nodes, below the limit: built as usual
    assert shared == {"a": [1, 2], "b": [[1, 2], [1, 2], [1, 2]]}


@pytest.mark.parametrize(
    "text, where",
    [("[" * 5000 + "]" * 5000, "x.yaml:1:65"), ("k: " + "[{k: " * 750 + "1" + "}]" * 750, "x.yaml:1:160")],
)
def test_deep_flow_nesting_is_refused_where_it_passes_the_limit(text, where):
    assert messages(text) == [f"{where}: nested more than 64 levels deep; no spec needs that"]


@pytest.mark.parametrize(
    "text",
    [
        "a: '" + "[" * 5000 + "'\n",  # brackets in quotes,
        'a: "' + "{" * 500 + '\\" ["\n',  # with an escaped quote,
        "a: |\n  " + "[" * 500 + "\nb: 1\n",  # in a block scalar (the bracket count is fooled; the parser is not)
        "# " + "[" * 500 + "\na: 1\n",  # in a comment
    ],
)
def test_brackets_that_are_text_are_not_nesting(text):
    assert parse(text).data


def test_merge_keys_are_refused():
    assert messages("base: &b {x: 1}\nother:\n  <<: *b\n") == [
        "x.yaml:3:3: other: merge keys (<<) are not supported; use `include:` or `defaults:`"
    ]


def test_complex_keys_are_refused():
    assert messages("? [a, b]\n: 1\n") == ["x.yaml:1:3: a key must be a plain name"]


def test_multiple_documents_are_refused():
    (msg,) = messages("a: 1\n---\nb: 2\n")
    assert msg == "x.yaml:2:1: YAML syntax: a spec is one YAML document; remove the `---` that starts a second one"


@pytest.mark.parametrize("tag", ["!!python/name:os.system", "!!binary aGk=", "!custom x", "!!set {a}"])
def test_other_tags_are_refused(tag):
    (msg,) = messages(f"a: {tag}\n")
    assert "is not allowed; specs use plain YAML only" in msg


def test_top_level_must_be_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(SpecError) as info:
        load_spec(str(path))
    assert str(info.value.issues[0]).endswith("1:1: a spec is a mapping of keys (nspec: 1, name: ...), not list")


def test_byte_order_mark_is_accepted():
    assert parse_document("\ufeffa: 1\n".encode(), "x.yaml").data == {"a": 1}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(alphabet=st.sampled_from("ab:- \n\t{}[],'\"&*!#|>%@`?0129.x"), max_size=200))
def test_no_input_escapes_as_anything_but_a_spec_error(tmp_path_factory, content):
    """Arbitrary bytes give a SpecError or a spec, never another exception (no traceback for any input)."""
    path = tmp_path_factory.mktemp("fuzz") / "s.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    try:
        load_spec(str(path))
    except SpecError as exc:
        assert exc.issues and all(i.location.line >= 1 and i.location.column >= 1 for i in exc.issues)
