"""The `nolima` family: needle-question pairs in NoLiMa's needle-set format (adobe-research/NoLiMa, ICML 2025), one
needle per context at the grid's depths, the answer a character's name that occurs once in the prompt, in the needle.

A needle set is a JSON list of experiments, as NoLiMa publishes them (``data/needlesets/*.json``; read as its
``evaluation/run_tests.py`` reads them): each has an ``id``, a ``needle`` template holding ``{CHAR}`` and argument
placeholders ``{1}``, ``{2}``, ..., ``questions`` by kind (NoLiMa's ``onehop``, ``twohop``; any name), ``tests``
each with its ``input_args``, and a ``character_set``; ``system_prompt``, ``task_template``, ``distractors`` and
``gold_answers`` are read past (a spec's prompt says how cells are put; the answer is the drawn character). One pair
is one experiment's test asked with one question kind. NoLiMa replaces a question's placeholders one at a time from
the template, so a question with two placeholders keeps all but the last; here every placeholder is replaced.

The answer is the only name the grader looks for, so it must occur once: a character whose name (case-sensitive) is
anywhere in the haystack's sources or the prompt templates is never drawn — the cells record which names were left
out — and a set whose every name is so left out is refused.

Without `needle_set`, nspec's own set (`latent_pairs.json`, written for nspec) is used: questions that reach their
needle only through a fact the model must know (``onehop``, ``twohop``), and ``literal`` questions that repeat the
needle's words, for comparison. `latent: true` refuses pairs whose needle and question share a content word.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar

from nspec.errors import CompileError
from nspec.inputs import Confinement, InputRefused, read_input

from .. import grid as grid_axes
from ..context import Insert
from ..draws import Draws
from ..json_input import DataError, Source, decode
from . import DEPTH, Axis, Detail, Draft, Family, Fill, ParamError, PlacingTask, Setup, Slot

BUILT_IN = "builtin"
MAX_NEEDLE_SET_BYTES = 16 * 2**20
_WORD = re.compile(r"[a-z0-9]+")
_PLACEHOLDER = re.compile(r"\{(\d{1,9})\}")  # {1}, {2}, ...: no number of thousands of digits
# Words that carry no content: a needle and its question may share them and still be latent.
_STOPWORDS = """a about after all also an and any are as at be been before being but by can could did do does for from
    had has have he her hers him his how i if in into is it its just me more most my no not of on once one only or other
    our out over own s she so some such than that the their them then there these they this those through to too under
    until up very was we were what when where which while who whom whose why will with would you your actually
    character characters"""
STOPWORDS = frozenset(_STOPWORDS.split())


@dataclass(frozen=True)
class Pair:
    """One needle and one question: an experiment's test asked with one question kind. ``needle`` holds ``{CHAR}``."""

    id: str  # "<experiment>/<test>/<kind>", each part `escaped`
    experiment: str
    test: str
    kind: str
    needle: str
    question: str


class NeedleSetError(ValueError):
    """A needle-set file not of NoLiMa's shape; the message says where in it."""


def content_words(text: str) -> set[str]:
    """The content words of a text, lower-cased, a plural's final s dropped (``bridges`` meets ``bridge``)."""
    words = _WORD.findall(text.replace("{CHAR}", " ").lower())
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in words if w not in STOPWORDS}


def shared_words(pair: Pair) -> set[str]:
    return content_words(pair.needle) & content_words(pair.question)


def lexical_similarity(pair: Pair) -> float:
    """Jaccard similarity of the needle's and the question's content words (0: latent, 1: the same words)."""
    a, b = content_words(pair.needle), content_words(pair.question)
    return round(len(a & b) / len(a | b), 3) if a | b else 0.0


def escaped(part: str) -> str:
    """A part of a pair's id with its `%` and `/` escaped (as in a URL), so that ids joined from distinct parts are
    distinct: experiment `a` with test `b/c` is `a/b%2Fc`, experiment `a/b` with test `c` is `a%2Fb/c`."""
    return part.replace("%", "%25").replace("/", "%2F")


def _fill(template: str, args: Sequence[str]) -> str:
    return _PLACEHOLDER.sub(lambda m: args[int(m.group(1)) - 1] if 0 < int(m.group(1)) <= len(args) else m[0], template)


def parse_needle_set(data: Any, name: str) -> tuple[list[Pair], dict[str, list[str]]]:
    """The pairs of a needle set, in file order, and each experiment's characters; `NeedleSetError` naming the place
    in ``name`` where it is not of NoLiMa's shape."""

    def bad(where: str, what: str) -> NeedleSetError:
        return NeedleSetError(
            f"{name}: {where}: {what} (a NoLiMa needle set: a list of experiments, each with id, "
            "needle, questions, tests and character_set)"
        )

    if not isinstance(data, list) or not data:
        raise bad("top level", "not a non-empty list")
    pairs: list[Pair] = []
    characters: dict[str, list[str]] = {}
    for i, exp in enumerate(data):
        at = f"[{i}]"
        if not isinstance(exp, dict):
            raise bad(at, "not an object")
        for key in ("id", "needle", "questions", "tests", "character_set"):
            if key not in exp:
                raise bad(at, f"no {key!r}")
        eid, needle, questions, tests, names = (exp[k] for k in ("id", "needle", "questions", "tests", "character_set"))
        if not isinstance(eid, str) or not eid:
            raise bad(f"{at}.id", "not a non-empty string")
        if eid in characters:
            raise bad(f"{at}.id", f"{eid!r} is used by an experiment before it")
        if not isinstance(needle, str) or needle.count("{CHAR}") != 1:
            raise bad(f"{at}.needle", "not a string holding {CHAR} once")
        if not isinstance(questions, dict) or not questions:
            raise bad(f"{at}.questions", "not a non-empty object of question templates by kind")
        for kind, question in questions.items():
            if not isinstance(question, str) or not question.strip() or "{CHAR}" in question:
                raise bad(f"{at}.questions.{kind}", "not a question (a non-empty string without {CHAR})")
        if not isinstance(tests, dict) or not tests:
            raise bad(f"{at}.tests", "not a non-empty object of tests")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
            raise bad(f"{at}.character_set", "not a non-empty list of names")
        characters[eid] = list(dict.fromkeys(names))
        wanted = max((int(n) for t in (needle, *questions.values()) for n in _PLACEHOLDER.findall(str(t))), default=0)
        for tid, test in tests.items():
            args = test.get("input_args") if isinstance(test, dict) else None
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args) or len(args) < wanted:
                raise bad(f"{at}.tests.{tid}.input_args", f"not a list of at least {wanted} strings")
            for kind, question in questions.items():
                pair_id = "/".join(map(escaped, (eid, tid, kind)))
                pairs.append(Pair(pair_id, eid, tid, kind, _fill(needle, args), _fill(question, args)))
    return pairs, characters


@functools.cache
def _built_in() -> tuple[list[Pair], dict[str, list[str]]]:
    data = resources.files("nspec.compiler.tasks").joinpath("latent_pairs.json").read_bytes()
    return parse_needle_set(decode(Source("latent_pairs.json", data)).value, "latent_pairs.json")


def load_needle_set(
    name: str, base_dir: str, confinement: Confinement | None
) -> tuple[list[Pair], dict[str, list[str]]]:
    """nspec's own set (``builtin``) or the file ``name`` (relative to the spec's folder, inside its root)."""
    if name == BUILT_IN:
        return _built_in()
    path = os.path.join(base_dir, name)
    problem = confinement.problem(path) if confinement is not None else None
    if problem is None and not os.path.lexists(path):
        problem = "does not exist (relative to the spec's folder)"
    if problem is None:
        try:
            raw = read_input(path, MAX_NEEDLE_SET_BYTES)
        except InputRefused as exc:
            problem = exc.reason
    if problem is not None:
        raise NeedleSetError(f"{name} {problem}")
    try:
        data = decode(Source(name, raw)).value
    except DataError as exc:
        raise NeedleSetError(str(exc)) from None
    return parse_needle_set(data, name)


def asked(pairs: list[Pair], params: Mapping[str, Any]) -> list[Pair]:
    """The pairs of the question kinds the spec asks (`questions`; all by default)."""
    kinds = params.get("questions")
    return [p for p in pairs if kinds is None or p.kind in kinds]


class NolimaFamily(Family):
    name = "nolima"
    params_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "needle_set": {"type": "string", "minLength": 1, "default": BUILT_IN},
            "questions": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
            "pairs_per_trial": {"type": "integer", "minimum": 1},
            "latent": {"type": "boolean", "default": False},
        },
    }
    haystack_kind = "text"
    path_params = ("needle_set",)
    built_in_names = frozenset({BUILT_IN})
    axes: ClassVar[tuple[Axis, ...]] = (DEPTH, Axis("question", "Question kind"))
    details: ClassVar[tuple[Detail, ...]] = (Detail("needle pair", "data.pair"),)
    default_scoring = ({"contains": "{answer}"},)

    def task(self, setup: Setup) -> NolimaTask:
        assert setup.source is not None
        return NolimaTask(setup)


def _prompt_texts(spec: Mapping[str, Any]) -> str:
    """Every prompt template of the spec, as one text: a name they hold could be taken for the answer."""
    prompts = [spec.get("prompt", {}), *spec.get("prompts", [])] + [m.get("prompt", {}) for m in spec["models"]]
    return "\n".join(str(v) for p in prompts for v in p.values())


class NolimaTask(PlacingTask):
    def __init__(self, setup: Setup) -> None:
        params = setup.params
        try:
            pairs, characters = load_needle_set(params.get("needle_set", BUILT_IN), setup.base_dir, setup.confinement)
        except NeedleSetError as exc:
            raise ParamError(("needle_set",), str(exc)) from None
        kinds = {p.kind for p in pairs}
        unknown = [k for k in params.get("questions", ()) if k not in kinds]
        if unknown:
            raise ParamError(
                ("questions",), f"no question kind {unknown[0]!r} in the needle set; it has {', '.join(sorted(kinds))}"
            )
        if params.get("latent", False):
            for pair in asked(pairs, params):
                shared = shared_words(pair)
                if shared:
                    raise ParamError(
                        ("latent",),
                        f"pair {pair.id} is not latent: its needle and question share {', '.join(sorted(shared))} "
                        f"({pair.needle!r} / {pair.question!r})",
                    )
        self.every = pairs  # every pair of the set, asked or not
        read = json.dumps([[vars(p) for p in pairs], characters], sort_keys=True)
        self.inputs_digest = hashlib.sha256(read.encode()).hexdigest()  # the set as read, for the compile hash
        self.pairs = asked(pairs, params)
        self.per_trial: int | None = params.get("pairs_per_trial")
        self.seed = setup.seed
        self.depths = grid_axes.depths(setup.grid["depths"])
        self.negatives = setup.negatives
        assert setup.source is not None
        # A name anywhere else in the prompt would be found without the needle: such names are never drawn.
        elsewhere = [*setup.source.documents, _prompt_texts(setup.spec), *(p.needle + p.question for p in pairs)]
        every = sorted({n for names in characters.values() for n in names})
        # With distractors, a name inside another (Ann, Anna) would be found twice.
        nested = self.names_needed() > 1
        self.excluded = [
            n
            for n in every
            if any(n in text for text in elsewhere) or (nested and any(n in m and m != n for m in every))
        ]
        self.characters = {e: [n for n in names if n not in self.excluded] for e, names in characters.items()}
        for pair in self.pairs:
            if len(self.characters[pair.experiment]) < self.names_needed():
                raise CompileError(
                    f"experiment {pair.experiment} of the needle set has {len(self.characters[pair.experiment])} "
                    f"character name(s) that the haystack and prompts do not hold (left out: "
                    f"{', '.join(self.excluded) or 'none'}); it needs {self.names_needed()}"
                )

    def names_needed(self) -> int:
        return 1

    def trial_pairs(self, trial: int) -> list[Pair]:
        if self.per_trial is None or self.per_trial >= len(self.pairs):
            return self.pairs
        return Draws(self.seed, "pairs", trial).sample(self.pairs, self.per_trial)

    def cells(self, lengths: Sequence[int]) -> int:
        per = len(self.pairs) if self.per_trial is None else min(self.per_trial, len(self.pairs))
        return len(lengths) * (len(self.depths) * per + self.negatives)

    def depth_plan(self) -> list[tuple[float | None, int]]:
        per = len(self.pairs) if self.per_trial is None else min(self.per_trial, len(self.pairs))
        return [(d, per) for d in self.depths] + [(None, self.negatives)]

    def drafts(self, slot: Slot) -> Iterator[Draft]:
        pairs = self.trial_pairs(slot.trial)
        for depth in self.depths:
            for pair in pairs:
                names = slot.draws("characters", slot.length, slot.trial, depth, pair.id).sample(
                    self.characters[pair.experiment], self.names_needed()
                )
                needle = pair.needle.replace("{CHAR}", names[0])
                inserts = [Insert(needle, depth)]
                needles = [{"id": pair.id, "index": 0, "role": "target", "text": needle, "depth_requested": depth}]
                extra_inserts, extra_needles, data = self.extras(slot, pair, depth, names[1:])
                yield Draft(
                    {"depth": depth, "pair": pair.id, "question": pair.kind, **self.identity(pair)},
                    Fill(inserts + extra_inserts, needles + extra_needles),
                    pair.question,
                    [names[0]],
                    data={
                        "pair": pair.id,
                        "needle": needle,
                        **({"excluded_characters": self.excluded} if self.excluded else {}),
                        **data,
                    },
                )
        for n in range(self.negatives):
            pair = slot.draws("negative", slot.length, slot.trial, n).choice(pairs)
            yield Draft({"negative": n}, Fill([], []), pair.question, negative=True)

    def identity(self, pair: Pair) -> dict[str, Any]:
        return {}

    def extras(
        self, slot: Slot, pair: Pair, depth: float, others: list[str]
    ) -> tuple[list[Insert], list[dict[str, Any]], dict[str, Any]]:
        """More inserts, their needle records and cell data beside the pair's needle (Context-Rot's distractors)."""
        return [], [], {}


FAMILY = NolimaFamily()
