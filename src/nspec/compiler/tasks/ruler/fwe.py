"""RULER's frequent words extraction (`fwe`): coded words (random strings of 6 lower-case letters) whose counts follow a
Zipf (zeta) law; the most frequent "word" is RULER's noise ``...``, and the model names the three that follow it.
Rebuilt from NVIDIA/RULER ``scripts/data/synthetic/freq_words_extraction.py`` with the template and answer prefix of
its ``constants.py``, word for word.

For a sample of ``num_words``, the word of rank k (from 1) appears ``floor(num_words · k^-alpha / zeta(alpha))``
times, over a vocabulary of ``(max_seq_length - 50) // 50`` coded words (RULER's ``vocab_size=-1``).

Size: ``num_words``, the scale of those counts (about the number of words in the text; the floors drop the rest).
RULER grows it from ``(L - 50) // 6`` by ``(L - 50) // 32`` (its ``incremental``) while the text stays under
``L - 50`` tokens, ``L`` the length: `step` gives that increment.
"""

from __future__ import annotations

import math
import string
from collections.abc import Hashable

from nspec.compiler.draws import Draws
from nspec.compiler.tasks.ruler.sampling import fixed_order
from nspec.compiler.tasks.sizing import NEVER, Built

TEMPLATE = (
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently "
    "appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What "
    "are the three most frequently appeared words in the above coded text?"
)
ANSWER_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"
TOKENS_TO_GENERATE = 50
NOISE_WORD = "..."

# Euler-Maclaurin for the Riemann zeta function: the first terms summed, the tail by its integral and Bernoulli
# corrections B_2j / (2j)!, as Cephes (scipy.special.zeta) does.
_ZETA_TERMS = 12
_BERNOULLI_OVER_FACTORIAL = (1 / 12, -1 / 720, 1 / 30240, -1 / 1209600, 1 / 47900160, -691 / 1307674368000)


def zeta(s: float) -> float:
    """The Riemann zeta function for s > 1, to double precision."""
    if not s > 1:
        raise ValueError("zeta(s) converges only for s > 1")
    total = math.fsum(float(k) ** -s for k in range(1, _ZETA_TERMS))
    n = float(_ZETA_TERMS)
    tail: float = n ** (1 - s) / (s - 1) + n**-s / 2
    rising = s  # s (s+1) ... (s+2j-2)
    for j, coefficient in enumerate(_BERNOULLI_OVER_FACTORIAL):
        tail += coefficient * rising * n ** (-s - 2 * j - 1)
        rising *= (s + 2 * j + 1) * (s + 2 * j + 2)
    return total + tail


CODED_WORD_LENGTH = 6  # RULER's --coded_wordlen


def step(max_seq_length: int) -> int:
    """RULER's increment of ``num_words`` at a length: (L - 50) // 32."""
    return (max_seq_length - TOKENS_TO_GENERATE) // 32


def first_size(max_seq_length: int) -> int:
    """Where RULER's search for ``num_words`` starts at a length: (L - 50) // 6, a word per coded word's letters."""
    return (max_seq_length - TOKENS_TO_GENERATE) // CODED_WORD_LENGTH


def counts(num_words: int, vocab_size: int, alpha: float) -> list[int]:
    """How often each rank appears: RULER's ``(num_words * k**-alpha / zeta(alpha)).astype(int)``, operation for
    operation in double precision."""
    z = zeta(alpha)
    return [int(num_words * (float(k) ** -alpha) / z) for k in range(1, vocab_size + 1)]


ASKED = 3  # the words the model names: the ranks after the noise word


def asked_from(alpha: float) -> int:
    """The smallest ``num_words`` at which every word asked for occurs (the last, of rank ``ASKED + 1``, once)."""
    z, weight = zeta(alpha), (ASKED + 1.0) ** -alpha
    size: int = max(1, math.ceil(z / weight))
    while int(size * weight / z) < 1:  # the float rounding of RULER's counts
        size += 1
    return size


def alpha_problem(alpha: float, max_seq_length: int) -> str | None:
    """Why ``alpha`` makes no sample at ``max_seq_length`` hold the words asked for (None when some size can): the
    text where the last of them first occurs holds more words than the length's tokens (a word is a token or more);
    or the law is so flat (``alpha`` near 1) that even the largest size searched makes a text far too short to fill
    the length (a coded word and its space are 7 characters, a token one or more, a proxy's factor at most 10)."""
    vocab_size = (max_seq_length - TOKENS_TO_GENERATE) // 50
    largest = first_size(max_seq_length) + (NEVER - 1) * max(1, step(max_seq_length))
    if 7 * 10 * sum(counts(largest, vocab_size, alpha)) < max_seq_length:
        return (
            f"with alpha {alpha}, fwe's Zipf law is so flat that no text it makes fills a context length of "
            f"{max_seq_length:,} (its count does not grow within any size searched); use an alpha further from 1 "
            "(RULER's is 2.0)"
        )
    words = sum(counts(asked_from(alpha), vocab_size, alpha))
    if words > max_seq_length - TOKENS_TO_GENERATE:
        return (
            f"with alpha {alpha}, the {ASKED} words fwe asks for all occur only once the text holds {words:,} words, "
            f"more than a context length of {max_seq_length:,} holds; use a smaller alpha (RULER's is 2.0) or longer "
            "context lengths"
        )
    return None


class FrequentWords:
    """The fwe samples of one task at one length. ``seed`` is the task's, ``sample`` the sample's number."""

    def __init__(
        self,
        seed: Hashable,
        sample: int,
        max_seq_length: int,
        alpha: float = 2.0,
        coded_wordlen: int = CODED_WORD_LENGTH,
        vocab_size: int = -1,
    ) -> None:
        self.seed, self.sample, self.alpha = seed, sample, alpha
        self.vocab_size = (max_seq_length - TOKENS_TO_GENERATE) // 50 if vocab_size == -1 else vocab_size
        if self.vocab_size < 4:
            raise ValueError(f"fwe needs a vocabulary of at least 4 words; {self.vocab_size} at this length")
        self.vocabulary = self._vocabulary(coded_wordlen)

    def _vocabulary(self, letters: int) -> list[str]:
        """``vocab_size`` distinct coded words in rank order, the first replaced by RULER's noise word."""
        draws = Draws("ruler-fwe", self.seed, self.sample, "vocabulary")
        words: dict[str, None] = {}
        while len(words) < self.vocab_size:
            words["".join(draws.choice(string.ascii_lowercase) for _ in range(letters))] = None
        return [NOISE_WORD, *list(words)[1:]]

    def build(self, size: int) -> Built:
        """The sample at ``num_words = size``: every rank's word as often as the Zipf law says, shuffled. RULER shuffles
        with its fixed seed, so every sample of a length has the same arrangement of ranks; so does this (the order is
        drawn from the task's seed and the text's length)."""
        words = [
            word
            for word, n in zip(self.vocabulary, counts(size, self.vocab_size, self.alpha), strict=True)
            for _ in range(n)
        ]
        order = fixed_order("ruler-fwe", self.seed, len(words))
        asked = self.vocabulary[1 : ASKED + 1]
        missing = [word for word, n in zip(asked, counts(size, ASKED + 1, self.alpha)[1:], strict=True) if not n]
        return Built(
            text=TEMPLATE.format(context=" ".join(words[i] for i in order)),
            answer_prefix=ANSWER_PREFIX,
            expected=asked,
            data={"num_words": size},
            unscorable=f"{len(missing)} of the {ASKED} words it asks for ({', '.join(missing)}) occur 0 times in its "
            f"text (alpha {self.alpha}, num_words {size:,}); use a smaller alpha or longer context lengths"
            if missing
            else None,
        )
