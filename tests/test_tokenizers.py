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
    paragraphs = [p.strip() for p in novel.decode().split("\n\n") if p.strip()][:400]
    documents = "\n\n".join(f"Document {i + 1}:\n{p}" for i, p in enumerate(paragraphs))  # RULER's qa layout
    question = "\nQuestion: Which of the documents names the ship?"
    texts = [words, words[:150_000] + needle + words[150_000:], NOISE * 3000, (NOISE + needle) * 500, documents]
    tokenizer = encoding(name)
    for text in texts:
        assert tokenizer.own_count(text) == whole(name, text)
        assert tokenizer.own_count(text[7:]) == whole(name, text[7:])  # the same parts, elsewhere: counts kept
        for ending in (question, question + " Answer:", question + "\nAnswer:"):  # as one model or another gets it
            assert tokenizer.own_count(text + ending) == whole(name, text + ending)
    # Last lines that must not be cut from the text: what follows their newline joins it in a piece.
    for ending in ("\n ", "\n  ", "\n\t", "\n\n", "\n \n", ":\n", "\n\n ", ".\n", "\n 1", "\n\u0301x"):
        text = words[:20_000] + ending
        assert tokenizer.own_count(text) == whole(name, text), repr(ending)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["e.", "e!", "e?", " ", "  ", "\n", "\t", "A", "Ab", "z", "'s", "é", "中", "1", "23", ".", ":", "/", "-"]
        ),
        min_size=200,
        max_size=900,
    )
)
def test_parts_are_cut_only_where_the_encodings_cut(pieces):
    text = "".join(pieces)
    for name in ENCODINGS:
        assert encoding(name).own_count(text) == whole(name, text)
