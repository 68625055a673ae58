"""RULER's common words extraction (`cwe`): a numbered list of words in which ``num_cw`` words appear ``freq_cw``
times and every other word ``freq_ucw`` times; the model names the ``num_cw`` most common. Rebuilt from NVIDIA/RULER
``scripts/data/synthetic/common_words_extraction.py`` with the template and answer prefix of its ``constants.py``,
word for word.

Before the list comes RULER's one-shot example: the same task on 40 words (common words 10 times, the rest 3 times;
below a length of 4096: 20 words, 3 and 1 times, and the sample's own list 6 and 1 times), with its answer.

Size: the number of distinct words in the sample's list. RULER's ``incremental`` is 10 words; since 2025-06 RULER
binary-searches every whole number of words from there up, before that it grew by ``incremental``. The words come
from wonderwords' nouns, adjectives and verbs (``words.common_words_vocabulary``, 8,169 of them): a size above that is
refused (``limit``). RULER switched in 2025-05 to a larger list of its own (``json/english_words.json``, a Git LFS file
not in the repository) past that point; before, it stopped at the vocabulary as this does.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Hashable, Sequence

from nspec.compiler.draws import Draws
from nspec.compiler.tasks.ruler.sampling import DistinctIndices, fixed_order
from nspec.compiler.tasks.ruler.words import common_words_vocabulary
from nspec.compiler.tasks.sizing import Built

TEMPLATE = (
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones that "
    "appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?"
)
ANSWER_PREFIX = " Answer: The top 10 words that appear most often in the list are:"
TOKENS_TO_GENERATE = 120
INCREMENTAL = 10


_NUMBERS: list[str] = []  # "1. ", "2. ", ...: what every list's words follow, made once


def numbered(words: Sequence[str]) -> str:
    """RULER's list: ``1. word1 2. word2 ...``."""
    _NUMBERS.extend(f"{i}. " for i in range(len(_NUMBERS) + 1, len(words) + 1))
    return " ".join(map(operator.add, _NUMBERS, words))  # as many as there are words


class CommonWords:
    """The cwe samples of one task at one length (``max_seq_length``, which picks RULER's short-context counts).
    ``seed`` is the task's, ``sample`` the sample's number."""

    def __init__(
        self,
        seed: Hashable,
        sample: int,
        max_seq_length: int,
        freq_cw: int = 30,
        freq_ucw: int = 3,
        num_cw: int = 10,
        num_fewshot: int = 1,
    ) -> None:
        self.seed, self.sample, self.num_cw, self.num_fewshot = seed, sample, num_cw, num_fewshot
        if max_seq_length < 4096:
            self.example_counts, self.counts = (20, 3, 1), (6, 1)
        else:
            self.example_counts, self.counts = (40, 10, 3), (freq_cw, freq_ucw)
        self.vocabulary = common_words_vocabulary()
        self.limit = len(self.vocabulary)
        # RULER's words ask for its 10 common words; another `num_cw` is asked for as many, or no reply naming what
        # the question asks for could pass (string_match_all wants every one).
        self.template, self.answer_prefix = (text.replace(" 10 ", f" {num_cw} ") for text in (TEMPLATE, ANSWER_PREFIX))
        self._words = DistinctIndices(Draws("ruler-cwe", seed, sample, "words"), self.limit)  # the same at every size

    def _list(
        self, words: DistinctIndices, num_words: int, common_repeats: int, uncommon_repeats: int
    ) -> tuple[str, list[str]]:
        """RULER's ``get_example``: ``num_words`` distinct words (the first of ``words``), the first ``num_cw``
        repeated ``common_repeats`` times and the others ``uncommon_repeats`` times, shuffled. RULER shuffles with its
        fixed seed, so every sample of a length has the same arrangement of places; so does this (the order is drawn
        from the task's seed and the list's length)."""
        if not 0 < num_words <= self.limit:
            raise ValueError(f"cwe draws from {self.limit:,} words; {num_words:,} asked")
        chosen = [self.vocabulary[i] for i in words.first(num_words)]
        common, uncommon = chosen[: self.num_cw], chosen[self.num_cw :]
        entries = common * common_repeats + uncommon * uncommon_repeats
        order = fixed_order("ruler-cwe", self.seed, len(entries))
        return numbered([entries[i] for i in order]), common

    @functools.cached_property
    def _examples(self) -> str:
        """The sample's one-shot example(s), with their answers: the same at every size."""
        examples = []
        for n in range(self.num_fewshot):
            words = DistinctIndices(Draws("ruler-cwe", self.seed, self.sample, "example", n), self.limit)
            context, answer = self._list(words, *self.example_counts)
            examples.append(self.template.format(context=context) + self.answer_prefix + " " + numbered(answer))
        return "\n".join(examples)

    def build(self, size: int) -> Built:
        """The sample with ``size`` distinct words: its one-shot example(s), then the task. The words at a larger size
        are those of a smaller one and more; the common words are the same at every size."""
        context, common = self._list(self._words, size, *self.counts)
        return Built(
            text=self._examples + "\n" + self.template.format(context=context),
            answer_prefix=self.answer_prefix,
            expected=common,
            data={"words": size},
            unscorable=None
            if size > self.num_cw
            else f"its list holds {size:,} words, every one of them a common word (num_cw {self.num_cw:,}): none "
            "appears more often than another",
        )
