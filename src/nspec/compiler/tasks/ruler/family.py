"""The `ruler` family: RULER's 13 tasks (NVIDIA/RULER ``scripts/synthetic.yaml``) as one family whose `task`
parameter names the task, so that one spec runs one task, or all 13 with `grid.params: {task: [...]}` (the task an
axis of the report, RULER's table).

Every cell is a `Sized` draft over the task's generator (`niah`, `vt`, `cwe`, `fwe`, `qa`), sized as RULER sizes
it: the largest size at which the first sample's prompt, answer prefix and RULER's tokens to generate fit the length
in the model's tokens is searched once per task and length (every whole size from RULER's step, its
``incremental``, up; fwe's grid from (L - 50) // 6 words by its step), and each sample is built at it, less the step
while it does not fit; the answer prefix is the prefill (an assistant turn where the provider
continues one, the end of the user turn where not), RULER's tokens to generate the cell's reserve and default
`max_tokens`. Trial ``i`` is RULER's sample ``i``; the draws are seeded by the spec's seed and the task's name.

The essay haystack is `corpus: paul-graham` (`nspec.corpora`), the essays joined with nothing between them as RULER
joins them; `qa_1` and `qa_2` read the user's SQuAD and HotpotQA files (`.datasets`), named by the `squad` and
`hotpotqa` parameters, relative to the spec that names them, or the copies `nspec data fetch` keeps (`data:squad`,
`data:hotpotqa`: the default).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from nspec.datasets import path_of
from nspec.errors import CellError, CompileError, UserError

from ... import grid as grid_axes
from .. import Axis, Built, Draft, Family, ParamError, Setup, Sized, SizeSearch, Slot, Table, Task, registry
from . import cwe, fwe, niah, qa, vt
from .haystacks import Essay

NIAH_PARAMS = ("num_needle_k", "num_needle_v", "num_needle_q")
VT_PARAMS = ("num_chains", "num_hops")
CWE_PARAMS = ("freq_cw", "freq_ucw", "num_cw")
FWE_PARAMS = ("alpha",)


@dataclass(frozen=True)
class RulerTask:
    """One of RULER's tasks: its generator's kind, the parameters it takes, its tokens to generate and metric."""

    kind: str
    takes: tuple[str, ...]
    tokens_to_generate: int
    metric: str = "string_match_all"
    dataset: str | None = None  # qa: "squad" or "hotpotqa"


TASKS: dict[str, RulerTask] = {
    **{name: RulerTask("niah", NIAH_PARAMS, niah.TOKENS_TO_GENERATE) for name in niah.TASKS},
    "vt": RulerTask("vt", VT_PARAMS, vt.TOKENS_TO_GENERATE),
    "cwe": RulerTask("cwe", CWE_PARAMS, cwe.TOKENS_TO_GENERATE),
    "fwe": RulerTask("fwe", FWE_PARAMS, fwe.TOKENS_TO_GENERATE),
    "qa_1": RulerTask("qa", ("squad",), qa.TOKENS_TO_GENERATE, "string_match_part", "squad"),
    "qa_2": RulerTask("qa", ("hotpotqa",), qa.TOKENS_TO_GENERATE, "string_match_part", "hotpotqa"),
}
# The data sets read when the spec names none: the copies `nspec data fetch` keeps (`nspec.datasets`).
DATA_FILES = {"squad": "data:squad", "hotpotqa": "data:hotpotqa"}
PATH_PARAMS = ("squad", "hotpotqa")


def _count(low: int, high: int, what: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high, "description": what}


PARAMS_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["task"],
    "properties": {
        "task": {"enum": list(TASKS), "description": "RULER's task, named as in its synthetic.yaml."},
        "num_needle_k": _count(1, 100, "niah: keys (RULER's num_needle_k)"),
        "num_needle_v": _count(1, 100, "niah: values per key (num_needle_v)"),
        "num_needle_q": _count(1, 100, "niah: keys asked (num_needle_q)"),
        "num_chains": _count(1, 100, "vt: chains of variables (num_chains)"),
        "num_hops": _count(1, 100, "vt: hops per chain (num_hops)"),
        "freq_cw": _count(1, 1000, "cwe: repeats of each common word (freq_cw)"),
        "freq_ucw": _count(1, 1000, "cwe: repeats of each other word (freq_ucw)"),
        "num_cw": _count(1, 100, "cwe: common words (num_cw)"),
        "alpha": {"type": "number", "exclusiveMinimum": 1, "maximum": 10, "description": "fwe: the Zipf exponent"},
        "squad": {"type": "string", "minLength": 1, "description": "qa_1: SQuAD 2.0's dev set (dev-v2.0.json)"},
        "hotpotqa": {
            "type": "string",
            "minLength": 1,
            "description": "qa_2: HotpotQA's dev set, distractor setting (hotpot_dev_distractor_v1.json)",
        },
    },
}


@functools.cache
def essay() -> Essay:
    """RULER's essay haystack: Paul Graham's essays joined with nothing between them (`corpus: paul-graham`, fetched
    into the cache on first use). One per process: its sentence split is reused by every task and size."""
    from nspec import corpora

    return Essay("".join(data.decode("utf-8") for _, data in corpora.documents("paul-graham")))


def _corpus(dataset: str, path: str) -> qa.Corpus:
    """The data set at ``path``, read once per process while the file stays as it was (the tasks of a sweep read
    the same one; a process compiling specs of several folders may meet another file by the same relative name)."""
    return _read_corpus(dataset, path, _stamp(path))


def _digest(path: str) -> str:
    """The SHA-256 of the file at ``path``, read once per process while the file stays as it was (validate and
    compile make the same tasks)."""
    return _file_digest(path, _stamp(path))


def _stamp(path: str) -> tuple[str, int, int] | None:
    """What tells the file at ``path`` from another, or from itself changed; None if it is missing."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return os.path.realpath(path), info.st_size, info.st_mtime_ns


@functools.cache
def _read_corpus(dataset: str, path: str, stamp: tuple[str, int, int] | None) -> qa.Corpus:
    from nspec.compiler.tasks.ruler.datasets import read_corpus

    return read_corpus(dataset, path)  # a missing file: `read_corpus` says where to get it


@functools.cache
def _file_digest(path: str, stamp: tuple[str, int, int] | None) -> str:
    with open(path, "rb") as data:
        return hashlib.file_digest(data, "sha256").hexdigest()


def data_file(params: Mapping[str, Any], dataset: str, base_dir: str) -> str:
    """The path of a QA data set as the spec names it: a path relative to the spec, or a data set `nspec data fetch`
    keeps (the default); `DataSetMissing` when that is not fetched yet."""
    return os.path.normpath(path_of(params.get(dataset, DATA_FILES[dataset]), base_dir))


class RulerFamily(Family):
    name = "ruler"
    params_schema = PARAMS_SCHEMA
    axes = (Axis("task", "Task"),)
    table = Table("ruler", "RULER", "task")  # RULER's results table, as its README prints it
    default_scoring = ({"ruler": True},)
    path_params = PATH_PARAMS

    def task(self, setup: Setup) -> RulerCells:
        return RulerCells(setup)

    def data_files(self, points: Sequence[Mapping[str, Any]], base_dir: str) -> list[str]:
        """The data sets the spec's tasks read (qa's), for the manifest's provenance."""
        datasets = [(p, TASKS[p["task"]].dataset) for p in points if p.get("task") in TASKS]
        return list(dict.fromkeys(data_file(p, dataset, base_dir) for p, dataset in datasets if dataset is not None))


class RulerCells(Task):
    """One RULER task's samples: one draft per slot, its trial the sample."""

    # The sample last made (its task, trial and length) with its last builds. One for every task: a sample's models
    # come one after another, so a compile holds one sample's texts (a few MB at 128K), not one per task.
    _current: ClassVar[tuple[tuple[RulerCells, int, int], tuple[Callable[[int], Built], int, int | None]] | None] = None

    def __init__(self, setup: Setup) -> None:
        self.params = dict(setup.params)
        self.name: str = self.params["task"]
        self.task = TASKS[self.name]
        self.seed = (setup.seed, self.name)
        self.base_dir = setup.base_dir
        # A parameter is refused only when no task of the spec's sweep takes it.
        names = list(dict.fromkeys(str({**self.params, **p}["task"]) for p in registry.points(setup.spec)))
        taken = {param for name in names for param in TASKS[name].takes}
        unused = sorted({k for k in self.params if k != "task"} - taken)
        if unused:
            raise ParamError((unused[0],), f"no task this spec runs takes {unused[0]!r} (it runs {', '.join(names)})")
        dataset = self.task.dataset
        if dataset is not None:  # the data set as read, for the compile hash (`Task.inputs_digest`)
            key = (dataset,) if dataset in self.params else ("task",)
            try:
                path = data_file(self.params, dataset, self.base_dir)
            except UserError as exc:
                raise ParamError(key, str(exc)) from None
            outside = setup.confinement.problem(path) if setup.confinement is not None else None
            if outside is not None:
                raise ParamError(key, f"{self.params.get(dataset, DATA_FILES[dataset])} {outside}")
            try:
                corpus = _corpus(dataset, path)
            except UserError as exc:
                raise ParamError(key, str(exc)) from None
            trials = int(setup.grid.get("trials", 1))
            if trials > len(corpus.questions):
                raise ParamError(
                    ("task",),
                    f"{self.name}: grid.trials is {trials}, but {path} has {len(corpus.questions):,} questions RULER "
                    "asks (one per sample)",
                )
            self.inputs_digest = _digest(path)
        elif self.task.kind == "fwe":
            alpha = self.params.get("alpha", 2.0)
            for length in grid_axes.context_lengths(setup.grid["context_lengths"]):
                problem = fwe.alpha_problem(alpha, length)
                if problem is not None:
                    raise ParamError(("alpha",) if "alpha" in self.params else ("task",), problem)
        elif self.task.kind == "niah" and niah.TASKS[self.name].type_haystack == "essay":
            try:
                essay()
            except UserError as exc:
                raise ParamError(("task",), str(exc)) from None

    def cells(self, lengths: Sequence[int]) -> int:
        return len(lengths)

    def drafts(self, slot: Slot) -> Iterator[Draft]:
        build, step, limit = self._sample(slot)
        task = self.task
        data = {"task": self.name, "metric": task.metric}

        def first(size: int) -> Built:  # RULER searches the size on one sample: the first
            return self._sample(replace(slot, trial=0))[0](size)

        # The grid searched: every whole size from RULER's step up (RULER binary-searches it); fwe's (its own loop,
        # older than the rest) from (L - 50) // 6 words by its step.
        grid = (fwe.first_size(slot.length), step) if task.kind == "fwe" else (step, 1)
        sized = Sized(build, step, limit, task.tokens_to_generate, SizeSearch(first, *grid))
        yield Draft({"task": self.name}, sized, _QUESTIONS[task.kind], data=data)

    def _sample(self, slot: Slot) -> tuple[Callable[[int], Built], int, int | None]:
        """The slot's sample (`_generator`, checked), its last builds kept: the same object for the models of a
        trial, which come one after another and build the same prompts (but vt's, which counts its example in the
        model's tokens)."""
        key = (self, slot.trial, slot.length)
        current = RulerCells._current
        if current is not None and current[0] == key and self.task.kind != "vt":
            return current[1]
        RulerCells._current = None  # its texts go before the next sample's are made
        build, step, limit = self._generator(slot)
        made = (functools.lru_cache(maxsize=2)(self._checked(build, slot)), step, limit)
        RulerCells._current = (key, made)
        return made

    def _checked(self, build: Callable[[int], Built], slot: Slot) -> Callable[[int], Built]:
        """The generator's build, its refusals (a size too small for what it holds) said as a compile error, its
        answer prefix without trailing white space: vt's ends in a space (`they are: `), which Anthropic refuses at
        the end of a prefill; dropped for every provider, so every model gets the same prompt (docs/ruler.md); and
        its question, the last line of every RULER template."""

        def checked(size: int) -> Built:
            try:
                built = build(size)
            except ValueError as exc:
                raise CellError(f"RULER's {self.name} at length {slot.length:,}: {exc}") from None
            question = built.text.rsplit("\n", 1)[-1]
            return replace(built, answer_prefix=built.answer_prefix.rstrip(), question=question)

        return checked

    def _generator(self, slot: Slot) -> tuple[Callable[[int], Built], int, int | None]:
        """The sample's build, RULER's step at the slot's length, and the largest size there is."""
        p, kind, sample, length = self.params, self.task.kind, slot.trial, slot.length
        try:
            if kind == "niah":
                args = niah.TASKS[self.name]
                args = replace(args, **{k: p[k] for k in NIAH_PARAMS if k in p})
                text = essay() if args.type_haystack == "essay" else None
                niah_sample = niah.Niah(args, self.seed, sample, text)
                return niah_sample.build, niah.incremental(args.type_haystack, length), None
            if kind == "vt":
                if slot.count is None:
                    raise CompileError("RULER's vt counts its one-shot example in the model's tokens")
                tracking = vt.VariableTracking(self.seed, sample, slot.count, **{k: p[k] for k in VT_PARAMS if k in p})
                return tracking.build, vt.incremental(length), None
            if kind == "cwe":
                common = cwe.CommonWords(self.seed, sample, length, **{k: p[k] for k in CWE_PARAMS if k in p})
                return common.build, cwe.INCREMENTAL, common.limit
            if kind == "fwe":
                frequent = fwe.FrequentWords(self.seed, sample, length, **{k: p[k] for k in FWE_PARAMS if k in p})
                return frequent.build, max(1, fwe.step(length)), None
            dataset = self.task.dataset
            assert dataset is not None
            corpus = _corpus(dataset, data_file(p, dataset, self.base_dir))
            return qa.QuestionAnswering(corpus, self.seed, sample).build, qa.INCREMENTAL, None
        except ValueError as exc:
            raise CellError(f"RULER's {self.name} at length {length:,}: {exc}") from None


# The question of a task, in general (a system prompt's {question}); each cell's is its sample's own.
_QUESTIONS = {
    "niah": "What are all the special magic values for the keys asked?",
    "vt": "Find all variables that are assigned the value asked.",
    "cwe": "What are the most common words in the list?",
    "fwe": "What are the three most frequently appeared coded words?",
    "qa": "Answer the question based on the given documents.",
}

FAMILY = RulerFamily()
