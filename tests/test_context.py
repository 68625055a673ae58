"""Property tests of cell building: exact counts, needles once each, at sentence boundaries, at the recorded depth."""

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nspec.compiler.context import TEXT_TOLERANCE, FitError, Insert, PromptParts, build_context, fixed_tokens
from nspec.compiler.haystack import TokenizedText, load_haystack
from nspec.compiler.tokenizers import ProxyTokenizer, encoding

TOKENIZERS = {
    "o200k_base": encoding("o200k_base"),
    "cl100k_base": encoding("cl100k_base"),
    "proxy": ProxyTokenizer(encoding("o200k_base"), 1.3),
}
PREFIXES = ["", "Context: ", "<document>\n", "Read the text below.\n\n", "«"]
SUFFIXES = ["", "\n\n{q}", " {q}", "\n</document>\n{q} Answer briefly.", "»\n{q}"]
BOUNDARY_BEFORE = re.compile(r"(^|[.!?][\"')\]]*\s|\n\n)$")


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
def test_built_context_is_exact(haystacks, name, length, depths, offset, prefix, suffix, system, prefill, reserve):
    tokenizer, tt = TOKENIZERS[name], haystacks[name]
    start = tt.last("boundary", offset, 0)
    question = "What is the special magic number?"
    parts = PromptParts(system, prefix, suffix.replace("{q}", question), prefill, reserve)
    needles = [f"The special magic number of needle {i} is: {1000003 + 7919 * i}." for i in range(len(depths))]
    inserts = [Insert(text, depth) for text, depth in zip(needles, depths, strict=True)]
    try:
        built = build_context(tt, tokenizer, start, parts, inserts, length)
    except FitError:
        own = fixed_tokens(tokenizer, parts) + sum(len(tokenizer.encode(n)) for n in needles) + 40
        assert length < tokenizer.scale(own) + reserve  # only when the prompt and needles alone nearly fill it
        return
    # The recorded count is the real one, and the request fits with almost nothing to spare.
    assert built.tokens == request_tokens(tokenizer, system, built.user, prefill)
    assert built.tokens + reserve <= length
    assert length - (built.tokens + reserve) <= TEXT_TOLERANCE + (1 if name == "proxy" else 0)
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
        else:
            assert BOUNDARY_BEFORE.search(body[:at]), body[max(0, at - 40) : at]  # at a sentence boundary
        if depth == 0:  # the very start: nothing before it but other needles placed at the start
            rest = body[:at]
            for other in needles:
                rest = rest.replace(other, "")
            assert rest.strip() == ""
        before = len(tokenizer.encode(body[:at]))
        total = max(1, len(tokenizer.encode(body)) - len(tokenizer.encode(needle)))
        assert abs(100 * before / total - actual) <= 100 * 2 / total  # the recorded depth, within 2 tokens
    if len(needles) == 1 and 0 < depths[0] < 100:
        # at or before the requested depth: the nearest boundary does not overshoot
        assert built.depths[0] <= depths[0] + 0.5
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
