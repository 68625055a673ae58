"""RULER's needle-in-a-haystack tasks (the eight ``niah_*``): needles "One of the special magic numbers for KEY is:
VALUE." hidden in a haystack; the model names every value of the keys it is asked about. Rebuilt from NVIDIA/RULER
``scripts/data/synthetic/niah.py`` (commit c3f5e3b4f87f), with the template and answer prefix of its ``constants.py``
and the tasks' parameters of ``scripts/synthetic.yaml``, word for word. RULER grades it with ``string_match_all``
(``scripts/eval/synthetic/constants.py``): the share of the expected values found in the answer, case-insensitively.

RULER's rules, as ``generate_input_output`` applies them:
- ``num_needle_k`` keys (at least ``num_needle_q``), each with ``num_needle_v`` values; one needle per key and value,
  the needles shuffled. A key or value is ``words`` (an adjective and a noun of the ``wonderwords`` lists joined by a
  hyphen, as RULER's sorted list of every such pair), ``numbers`` (7 digits, no leading zero) or ``uuids`` (version 4).
- Haystacks: ``noise`` (RULER's five noise sentences as one line, repeated), ``needle`` (distractor needles, each a
  key and a value of their own, one per line) or ``essay`` (`haystacks.Essay`: words of the essays, split into
  sentences).
- Placement: into a ``noise`` or ``needle`` haystack, each needle goes before a distinct line drawn uniformly (never
  after the last), lines joined by newlines; into an ``essay``, at distinct depths drawn from RULER's 40
  (`haystacks.DEPTHS`), between sentences (`haystacks.insert_at_depths`).
- The query: ``num_needle_q`` distinct keys drawn, named "a, b, and c"; the expected answers are their values, key by
  key. When a single value is asked (``num_needle_q * num_needle_v == 1``) the template speaks in the singular, by
  RULER's own replacements ("Some" → "A", "are all" → "is", "are" → "is", "numbers" → "number"); the needles keep
  the plural, as in RULER.
- The answer prefix is cut off where its first ten characters last occur, as RULER's ``generate_samples`` does.

Where nspec differs, so that a sample's answers are what its text says: keys are drawn distinct (RULER draws them
independently: two needles could share a key, one in several million), and a distractor never holds a needle's key
(RULER does not check; with word keys, about one 128K-token ``niah_multikey_2`` sample in a thousand has one).
Randomness comes from nspec's seeded draws, never Python's ``random``: the rules are RULER's, the stream is not.

Size and step (``size`` is RULER's ``num_haystack``): ``noise``, lines of noise; ``needle``, distractor needles;
``essay``, words. RULER's ``incremental`` is 25 lines or distractors and 500 words, 5 for ``noise`` and ``needle``
below 4,096 tokens. RULER's length test counts the text with its answer prefix plus 128 tokens to generate. Since
2025-06 RULER binary-searches every whole number from ``incremental`` up; before, it grew by ``incremental``. The
names, values, distractors and essay depths are the same at every size, so a larger size is a longer text.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable
from dataclasses import dataclass

from nspec.compiler.draws import Draws
from nspec.compiler.tasks.ruler.haystacks import DEPTHS, NOISE, Essay
from nspec.compiler.tasks.ruler.sampling import distinct_indices
from nspec.compiler.tasks.ruler.words import wonderwords
from nspec.compiler.tasks.sizing import Built

# NVIDIA/RULER scripts/data/synthetic/constants.py, TASKS['niah'] (commit c3f5e3b4f87f), verbatim.
TEMPLATE = """Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic {type_needle_v} for {query} mentioned in the provided text?"""  # noqa: E501
ANSWER_PREFIX = """ The special magic {type_needle_v} for {query} mentioned in the provided text are"""
TOKENS_TO_GENERATE = 128
# NVIDIA/RULER scripts/data/synthetic/niah.py, verbatim.
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."

HAYSTACKS = ("noise", "essay", "needle")
KINDS = ("words", "numbers", "uuids")
INCREMENTAL = {"noise": 25, "essay": 500, "needle": 25}
SHORT_INCREMENTAL = 5  # noise and needle haystacks below 4,096 tokens


@dataclass(frozen=True)
class NiahTask:
    """A niah task's arguments, named as in RULER's ``synthetic.yaml``."""

    type_haystack: str
    type_needle_k: str
    type_needle_v: str
    num_needle_k: int = 1
    num_needle_v: int = 1
    num_needle_q: int = 1

    def __post_init__(self) -> None:
        if self.type_haystack not in HAYSTACKS:
            raise ValueError(f"type_haystack {self.type_haystack!r}: one of {', '.join(HAYSTACKS)}")
        for kind in (self.type_needle_k, self.type_needle_v):
            if kind not in KINDS:
                raise ValueError(f"needle type {kind!r}: one of {', '.join(KINDS)}")
        if min(self.num_needle_k, self.num_needle_v, self.num_needle_q) < 1:
            raise ValueError("a niah task needs at least one key, value and query")
        if self.type_haystack == "essay" and self.needles > len(DEPTHS):
            raise ValueError(f"an essay holds at most {len(DEPTHS)} needles, one per depth")

    @property
    def keys(self) -> int:
        """RULER's ``num_needle_k = max(num_needle_k, num_needle_q)``."""
        return max(self.num_needle_k, self.num_needle_q)

    @property
    def needles(self) -> int:
        return self.keys * self.num_needle_v


# NVIDIA/RULER scripts/synthetic.yaml (commit c3f5e3b4f87f).
TASKS = {
    "niah_single_1": NiahTask("noise", "words", "numbers"),
    "niah_single_2": NiahTask("essay", "words", "numbers"),
    "niah_single_3": NiahTask("essay", "words", "uuids"),
    "niah_multikey_1": NiahTask("essay", "words", "numbers", num_needle_k=4),
    "niah_multikey_2": NiahTask("needle", "words", "numbers"),
    "niah_multikey_3": NiahTask("needle", "uuids", "uuids"),
    "niah_multivalue": NiahTask("essay", "words", "numbers", num_needle_v=4),
    "niah_multiquery": NiahTask("essay", "words", "numbers", num_needle_q=4),
}


def incremental(type_haystack: str, max_seq_length: int) -> int:
    """RULER's ``incremental`` for a haystack at a length, in the haystack's unit."""
    if type_haystack != "essay" and max_seq_length < 4096:
        return SHORT_INCREMENTAL
    return INCREMENTAL[type_haystack]


@functools.cache
def _adjectives_nouns() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Distinct adjectives and nouns: each pair makes a different word (checked in the tests), so a pair drawn
    uniformly is a uniform draw from RULER's ``sorted(set(f"{adj}-{noun}" ...))``."""
    return tuple(sorted(set(wonderwords("adjectivelist")))), tuple(sorted(set(wonderwords("nounlist"))))


def draw(draws: Draws, kind: str) -> str:
    """One key or value of a kind: RULER's ``generate_random``."""
    if kind == "numbers":
        return draws.digits(7)
    if kind == "uuids":
        return draws.uuid4()
    adjectives, nouns = _adjectives_nouns()
    pair = draws.below(len(adjectives) * len(nouns))
    return f"{adjectives[pair // len(nouns)]}-{nouns[pair % len(nouns)]}"


@dataclass(frozen=True)
class _Needles:
    keys: list[str]
    values: list[list[str]]  # per key
    needles: list[str]  # shuffled
    depths: list[int]  # essay: one per needle
    queries: list[int]  # indices of the keys asked


class Niah:
    """The samples of one niah task. ``seed`` is the task's (RULER's ``--random_seed``), ``sample`` the sample's
    number; ``essay`` the essay haystack, for a task on one."""

    def __init__(self, task: NiahTask, seed: Hashable, sample: int, essay: Essay | None = None) -> None:
        if (essay is not None) != (task.type_haystack == "essay"):
            raise ValueError("an essay is given for an essay haystack, and only then")
        self.task, self.seed, self.sample, self.essay = task, seed, sample, essay
        self._distractors: list[str] = []
        self._distractor_draws = Draws("ruler-niah", seed, sample, "distractors")

    @functools.cached_property
    def _drawn(self) -> _Needles:
        """What does not depend on the size: keys, values, the needles' order, essay depths and the query."""
        task, draws = self.task, Draws("ruler-niah", self.seed, self.sample)
        keys: list[str] = []
        values: list[list[str]] = []
        needles: list[str] = []
        for _ in range(task.keys):
            key = draw(draws, task.type_needle_k)
            while key in keys:
                key = draw(draws, task.type_needle_k)
            keys.append(key)
            values.append([draw(draws, task.type_needle_v) for _ in range(task.num_needle_v)])
            needles += [NEEDLE.format(type_needle_v=task.type_needle_v, key=key, value=v) for v in values[-1]]
        needles = draws.shuffled(needles)
        depths = []
        if task.type_haystack == "essay":
            depths = [DEPTHS[i] for i in distinct_indices(draws, len(DEPTHS), len(needles))]
        queries = distinct_indices(draws, task.keys, task.num_needle_q)
        return _Needles(keys, values, needles, depths, queries)

    def _distractor_lines(self, count: int) -> list[str]:
        """The first ``count`` distractor needles: the same ones at every size."""
        task, keys = self.task, set(self._drawn.keys)
        while len(self._distractors) < count:
            key = draw(self._distractor_draws, task.type_needle_k)
            while key in keys:
                key = draw(self._distractor_draws, task.type_needle_k)
            value = draw(self._distractor_draws, task.type_needle_v)
            self._distractors.append(NEEDLE.format(type_needle_v=task.type_needle_v, key=key, value=value))
        return self._distractors[:count]

    def _context(self, size: int) -> str:
        drawn = self._drawn
        if self.essay is not None:
            return self.essay.inserted(size, drawn.needles, drawn.depths)
        if size < len(drawn.needles):
            raise ValueError(f"{size} haystack lines leave no place for {len(drawn.needles)} needles")
        lines = [NOISE] * size if self.task.type_haystack == "noise" else self._distractor_lines(size)
        places = distinct_indices(Draws("ruler-niah", self.seed, self.sample, "places", size), size, len(drawn.needles))
        for place, needle in zip(sorted(places, reverse=True), drawn.needles, strict=True):
            lines.insert(place, needle)
        return "\n".join(lines)

    def build(self, size: int) -> Built:
        """The sample with a haystack of ``size`` (lines, distractors or words)."""
        task, drawn = self.task, self._drawn
        queries = [drawn.keys[i] for i in drawn.queries]
        answers = [value for i in drawn.queries for value in drawn.values[i]]
        query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
        template, type_needle_v = TEMPLATE + ANSWER_PREFIX, task.type_needle_v
        if task.num_needle_q * task.num_needle_v == 1:  # RULER's singular, replaced in its template as here
            template = template.replace("Some", "A")
            template = template.replace("are all", "is")
            template = template.replace("are", "is")
            template = template.replace("answers", "answer")
            type_needle_v = type_needle_v[:-1]
        prompt = template.format(type_needle_v=type_needle_v, context=self._context(size), query=query)
        cut = prompt.rfind(ANSWER_PREFIX[:10])
        return Built(
            text=prompt[:cut],
            answer_prefix=prompt[cut:],
            expected=answers,
            data={"size": size, "queries": queries, "needles": drawn.needles},
        )
