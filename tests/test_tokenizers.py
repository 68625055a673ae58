"""Counting a long text in parts: the sum of the parts' counts is the whole text's count, for every encoding."""

from itertools import permutations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nspec.compiler.haystack import corpus_documents
from nspec.compiler.tasks.ruler.cwe import CommonWords
from nspec.compiler.tasks.ruler.fwe import FrequentWords
from nspec.compiler.tasks.ruler.niah import TASKS, Niah
from nspec.compiler.tasks.ruler.vt import VariableTracking
from nspec.compiler.tokenizers import _part_ends, _parts, _shared_length, _words, encoding

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


# Pieces of text that make and unmake the cuts `_part_ends` looks for: sentence ends, newlines before letters or not.
PIECES = [
    "e.",
    "e!",
    "e?",
    " ",
    "  ",
    "\n",
    "\t",
    "A",
    "Ab",
    "z",
    "'s",
    "é",
    "中",
    "1",
    "23",
    "²",
    "½",
    ".",
    ":",
    "/",
    "-",
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(PIECES), min_size=200, max_size=900))
def test_parts_are_cut_only_where_the_encodings_cut(pieces):
    text = "".join(pieces)
    for name in ENCODINGS:
        assert encoding(name).own_count(text) == whole(name, text)


@pytest.mark.parametrize("name", ENCODINGS)
def test_texts_that_open_alike_are_counted_exactly(name):
    # Long texts that share their start with the text counted before up to one of its cuts (after a newline, at a
    # sentence's end), or one or two characters past it, then go on otherwise (some unmaking the cut): each counted
    # from what it shares with that text, then from its own parts. The number at the end makes every text new.
    tokenizer, start, number = encoding(name), (NOISE + "\n") * 360, 0  # past `_SHARED_CHARACTERS`
    endings = ["Abc", "\nAbc", " \n", "\n\n", "  Abc", "1", "Ab\nCd. Ef", ""]
    for opening in ("x\n", "x\n\n", "Here we go.", "Here we go. ", "Here we go. T", "x"):
        for first, second in permutations(endings, 2):
            for ending in (first, second):
                number += 1
                text = f"{start}{opening}{ending} {number}"
                assert tokenizer.own_count(text) == whole(name, text), repr(opening + ending)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab", max_size=40), st.integers(0, 3000), st.text(alphabet="abc", max_size=3))
def test_the_length_two_texts_open_with_alike_is_found(unit, repeats, ending):
    text = unit * repeats
    other = text[: len(text) // 2] + ending + text[len(text) // 2 :]
    alike = next((i for i, (x, y) in enumerate(zip(text, other, strict=False)) if x != y), min(len(text), len(other)))
    assert _shared_length(text, other) == _shared_length(other, text) == alike


# Words, and what stands at their edges: digits, spaces, newlines, punctuation, letters of other scripts, contractions,
# combining marks, white space that is not a space, characters outside the Basic Multilingual Plane.
UNITS = [
    *["1.", "23.", "456", "7890.", "1234567.", "12:30", "word", "Word", "WORD", "wOrD", "abc-def", "x=1", "VAR"],
    *["'s", "'S", "'ll", "'VE", "don't", "it's", "'", '"quoted"', "...", ".", ",", ":", "-", "/", "(a)", "$5"],
    *["é", "École", "straße", "中文", "Ωμέγα", "\u0301", "x\u0301", "😀", "a😀b", "²", "½"],
    "3f2a9c1e-77b0-4e4c-9d1b-0c3a5e2f1d00",
    *["\n", "\n\n", "\r\n", "\r", "\t", "\xa0", "\u3000", "\u2028", "\x1c", "\x0b", "", "e.", "T", "Document 3:\n"],
]
SEPARATORS = [" ", " ", " ", " ", "  ", "   ", "\n", " \n", "\n ", "\t ", "\xa0 ", "\u3000 ", "\x1c ", " \t", ""]


def spaced_words_count(name: str, text: str) -> int:
    """``text``'s count as the sum of its words', each encoded alone (the first as it is, the others after a space)."""
    first, *rest = _words(text)
    return whole(name, first) + sum(whole(name, " " + word) for word in rest)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(UNITS), st.sampled_from(SEPARATORS)), min_size=1, max_size=60))
def test_a_text_is_cut_into_words_only_where_the_encodings_cut(pairs):
    for text in ("".join(unit + separator for unit, separator in pairs), "".join(s + u for u, s in pairs)):
        assert " ".join(_words(text)) == text
        for name in ENCODINGS:
            assert spaced_words_count(name, text) == whole(name, text), repr(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(" \n\t\r\xa0\u3000\x1c'.:,-/_0123456789aZé中\u0301😀sStT²"), max_size=80))
def test_random_text_is_cut_into_words_only_where_the_encodings_cut(text):
    for name in ENCODINGS:
        assert spaced_words_count(name, text) == whole(name, text), repr(text)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(UNITS), st.sampled_from(SEPARATORS)), min_size=1, max_size=60))
def test_a_long_part_counted_word_by_word_is_counted_exactly(pairs):
    # Over 4,096 characters, no line opening with a letter: one part, counted by its words, some kept from others.
    chunk = "".join(unit + separator for unit, separator in pairs).replace("\n", "\n ")
    text = "".join(f"{chunk}{i} " for i in range(4096 // (len(chunk) + 1) + 2))
    assert any(len(part) > 4096 for part in _parts(text, _part_ends(text)))
    for name in ENCODINGS:
        assert encoding(name).own_count(text) == whole(name, text), repr(text[:200])


def ruler_texts(name: str) -> list[str]:
    """RULER's generated texts: cwe's lists and fwe's coded words (long parts, counted by their words), needle and
    noise haystacks, variable tracking's lines (counted by their lines); each at two sizes, in two samples."""
    texts = []
    for sample in range(2):
        for size in (300, 1200):
            texts.append(CommonWords("t", sample, 131072).build(size).text)
            texts.append(FrequentWords("t", sample, 16384).build(size * 4).text)
            texts.append(VariableTracking("t", sample, encoding(name).count).build(size // 4).text)
            for task in ("niah_single_1", "niah_multikey_2", "niah_multikey_3"):
                texts.append(Niah(TASKS[task], "t", sample).build(size // 4).text)
    return texts


@pytest.mark.parametrize("name", ENCODINGS)
def test_ruler_texts_are_counted_exactly(name):
    tokenizer = encoding(name)
    for text in ruler_texts(name):
        assert len(text) > 4096
        assert tokenizer.own_count(text) == whole(name, text)
        assert tokenizer.own_count("Q " + text) == whole(name, "Q " + text)  # the same lines and words again, kept


@pytest.mark.parametrize("name", ENCODINGS)
def test_words_that_tiktoken_must_repair_are_counted_as_it_counts_them(name):
    # Lone surrogates (and a pair as two code points) cannot be UTF-8: tiktoken replaces them before it encodes.
    words = " ".join(f"w{i}\ud800 \ud83d\ude00{i} x\udfff." for i in range(800))
    assert any(len(part) > 4096 for part in _parts(words, _part_ends(words)))
    assert encoding(name).own_count(words) == whole(name, words)
    lines = "\n".join(f"Line {i}\ud800 x\udfff." for i in range(800))  # lines, counted one by one
    assert encoding(name).own_count(lines) == whole(name, lines)
