"""Counting a long text in parts: the sum of the parts' counts is the whole text's count, for every encoding."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nspec.compiler.haystack import corpus_documents
from nspec.compiler.tokenizers import encoding

ENCODINGS = ["o200k_base", "cl100k_base"]
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "


def whole(name: str, text: str) -> int:
    return len(encoding(name).encoding.encode_ordinary(text))


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_long_text_counted_in_parts_is_counted_exactly(name):
    (_, novel), *_ = corpus_documents("austen")
    words = " ".join(novel.decode().split())[:300_000]  # RULER's essay haystacks are words joined by spaces
    needle = " One of the special magic numbers for sable-ferry is: 4471002. "
    texts = [words, words[:150_000] + needle + words[150_000:], NOISE * 3000, (NOISE + needle) * 500]
    tokenizer = encoding(name)
    for text in texts:
        assert tokenizer.own_count(text) == whole(name, text)
        assert tokenizer.own_count(text[7:]) == whole(name, text[7:])  # the same parts, elsewhere: counts kept


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["e.", "e!", "e?", " ", "  ", "\n", "\t", "A", "Ab", "z", "'s", "é", "中", "1", "23", ".", "/", "-"]
        ),
        min_size=200,
        max_size=900,
    )
)
def test_parts_are_cut_only_where_the_encodings_cut(pieces):
    text = "".join(pieces)
    for name in ENCODINGS:
        assert encoding(name).own_count(text) == whole(name, text)
