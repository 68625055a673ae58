"""From a resolved spec to cells: one record and one request line at a time, in a fixed order.

The spec's task family (`compiler.tasks`) makes the drafts of each slot; the fitters (`compiler.fit`) fit them to
their lengths, and `compiler.record` makes their records and request lines — one code path for every family.

Order: trial first. A family that fills a haystack goes model by model (the haystack tokenised once per model and
trial), then prompt variant, context length, `grid.params` point and the family's order (for needles: depth, with
the negative controls last). A family that makes its contexts goes prompt variant, length and point, then each of
the sample's models in turn, so that they share the sample's builds and counts. Memory holds the tokenised haystack
of the current trial per tokenizer, never the run.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from nspec.errors import CellError, CompileError
from nspec.inputs import Confinement

from . import grid as grid_axes
from .counts_file import CountsFile, Fetch
from .fit.cache_groups import CacheGroups
from .fit.fill import FillFitter
from .fit.fixed import FixedFitter
from .fit.sized import SizedFitter
from .haystack import HaystackSource, SourceUse
from .haystack_texts import HaystackTexts
from .models import Model, ModelSlot, model_prompt, models_of, prompt_variants
from .record import Cell, Records
from .stats import CompileStats
from .tasks import Fixed, ParamError, PlacingTask, Setup, Sized, Slot, Task, registry

# The haystack of a family that reads none.
_NO_HAYSTACK = HaystackSource("none", [], "", "none", "")


class Mode(enum.Enum):
    """What a compilation is for."""

    COMPILE = "compile"  # every cell, with its request line
    PLAN = "plan"  # every cell counted; request lines only where the provider's counts are looked up by them
    VALIDATE = "validate"  # `check`: what compile would refuse, found with as little work as finds it


@dataclass(frozen=True)
class _Pass:
    """The part of the grid one walk over the cells covers."""

    trials: int
    lengths: list[int]
    models: list[Model]
    read_haystack: bool = True  # False: each Fill draft's prompt and inserts checked against its length, unbuilt


class Compilation:
    """Every cell of a resolved spec, made in order (`cells`), counted by arithmetic (`count`) or checked
    (`check`, in `Mode.VALIDATE`); holds the tokenised haystacks of the current trial and the counters the manifest
    reports (`stats`)."""

    def __init__(
        self,
        spec: Mapping[str, Any],
        source: HaystackSource | None,
        mode: Mode = Mode.COMPILE,
        counts: CountsFile | None = None,
        fetch: dict[str, Fetch] | None = None,
        base_dir: str = ".",
        confinement: Confinement | None = None,
    ) -> None:
        self.spec, self.mode = spec, mode
        self.seed: int = spec.get("seed", 0)
        self.family = registry.family(registry.named(spec))
        self.fills = self.family.needs_haystack  # its drafts are `Fill`: a haystack is cut to each length
        if self.fills and source is None:
            raise CompileError(f"the {self.family.name} task family places its content in a haystack: give one")
        self.source: HaystackSource = source if source is not None and self.fills else _NO_HAYSTACK
        self.task_files: list[dict[str, Any]] = []  # the files the family read (a data set): into the compile hash
        self.tasks = self._tasks(base_dir, confinement)
        self.models = models_of(spec, counts, fetch)
        if not self.fills:
            for model in self.models:
                model.cache = None  # no haystack shared between cells: nothing to cache
        self.variants = prompt_variants(spec)
        self.lengths = grid_axes.context_lengths(spec["grid"]["context_lengths"])
        self.trials: int = spec["grid"].get("trials", 1)
        self.on_too_long: str = spec.get("run", {}).get("on_too_long", "error")
        self.stats = CompileStats(SourceUse(len(self.source.documents)))
        self.texts = HaystackTexts(self.seed, max(self.lengths), self.trials, self.stats.pass_tokens)
        axes = tuple(a.key for a in self.family.axes)
        self.records = Records(self.family.name, axes, bool(registry.sweeps(spec)), mode is Mode.COMPILE)
        self.fill = self._fill_fitter(self.records, self.stats)
        self.sized = SizedFitter(self.records, self.stats)
        self.fixed = FixedFitter(self.lengths, self.stats)

    def _fill_fitter(self, records: Records, stats: CompileStats) -> FillFitter:
        plan = [step for _, task in self.tasks if isinstance(task, PlacingTask) for step in task.depth_plan()]
        haystack = self.spec.get("haystack", {})
        return FillFitter(
            records,
            stats,
            CacheGroups(self.seed, self.lengths, plan, self.source.kind == "stack"),
            by_tokens=haystack.get("boundary") == "period-token",  # needlehaystack's cut, counted by the tokenizer
            separator=self.source.separator if self.source.kind == "stack" else None,
            # noise repeats its few sentences by design
            refuse_repetition=haystack.get("repeat", "allow") == "error" and self.source.kind != "noise",
        )

    def _tasks(self, base_dir: str, confinement: Confinement | None) -> list[tuple[dict[str, Any], Task]]:
        """The family's task at each point of `grid.params`, with the point."""
        params = registry.params_of(self.spec)
        tasks = []
        for point in registry.points(self.spec):
            source = self.source if self.fills else None
            setup = Setup(self.spec, {**params, **point}, source, self.seed, base_dir, confinement)
            try:
                task = self.family.task(setup)
            except ParamError as exc:
                exc.point = point
                raise
            if self.fills and not isinstance(task, PlacingTask):
                raise CompileError(f"the {self.family.name} task family reads a haystack, but its task places nothing")
            tasks.append((point, task))
            self.task_files += [f for f in setup.files if f not in self.task_files]
        return tasks

    def count(self) -> int:
        """How many cells the grid makes, by arithmetic (nothing is built): what the cell cap is checked against
        before any work. Cells that `run.on_too_long: drop` would drop are counted."""
        per_model = sum(task.cells(self.lengths) for _, task in self.tasks)
        return self.trials * len(self.models) * len(self.variants) * per_model

    def cells(self) -> Iterator[Cell]:
        """Every cell, in order."""
        return self._walk(_Pass(self.trials, self.lengths, self.models))

    def check(self, compiles_next: bool = False) -> None:
        """What compile refuses, found as compile finds it (validate), every model counted as compile counts it (a
        local model by its own tokenizer): the first trial at the shortest length — a generated context sized and
        built as compile sizes and builds it; for a `Fill` draft, its prompt and inserts counted alone, the haystack
        not read — then `check_longest`.

        A caller that compiles next (``compiles_next``) has its compile run `check_longest` before any work, and
        makes a generated context's cells itself, the first trial's among its first, refused alike (`CellError`):
        those are left to it, not built and counted twice."""
        if compiles_next and not self.fills:
            return
        for _ in self._walk(_Pass(1, [min(self.lengths)], self.models, read_haystack=not self.fills)):
            pass
        if not compiles_next:
            self.check_longest()

    def check_longest(self) -> None:
        """Where a haystack is read, the first trial at the longest length built as compile builds it (the haystack
        tokenised once, and kept for the cells): a cell that cannot be made there is a `CellError`, found before
        any cell is written."""
        if not self.fills:
            return
        # Fitted apart from the cells: their counters, cache groups and fitting start from nothing, no record is
        # written; only the tokenised haystacks are kept.
        kept = self.stats, self.fill
        self.stats = CompileStats(SourceUse(len(self.source.documents)))
        self.fill = self._fill_fitter(dataclasses.replace(self.records, requests=False), self.stats)
        try:
            for _ in self._walk(_Pass(1, [max(self.lengths)], self.models)):
                pass
        except CompileError as exc:  # a model's max_context under the length too: a cell it cannot make
            raise CellError(str(exc)) from None
        finally:
            self.stats, self.fill = kept

    def _walk(self, scope: _Pass) -> Iterator[Cell]:
        for trial in range(scope.trials):
            if self.fills:
                for model in scope.models:
                    yield from self._filled_trial(scope, model, trial)
            else:
                yield from self._generated_trial(scope, trial)

    def _generated_trial(self, scope: _Pass, trial: int) -> Iterator[Cell]:
        """A trial of a family that makes its contexts: each sample's models one after another, so that they share
        the sample's generator, builds and counts (RULER's models build the same text, bar its last line)."""
        for variant, prompt in self.variants:
            prompts = {m.label: model_prompt(prompt, m) for m in scope.models}
            for length in scope.lengths:
                models = [m for m in scope.models if self._takes(m, length, scope.lengths)]
                for point, task in self.tasks:
                    for model in models:
                        slot = ModelSlot(model, variant, prompts[model.label], length, trial, point, task)
                        yield from self._generated_cells(slot, task.drafts(self._family_slot(slot)))

    def _generated_cells(self, slot: ModelSlot, drafts: Iterable[Any]) -> Iterator[Cell]:
        for draft in drafts:
            if isinstance(draft.context, Sized):
                yield self.records.cell(slot, draft, self.sized.fit(slot, draft, draft.context))
            elif isinstance(draft.context, Fixed):
                fitted = self.fixed.fit(slot, draft, draft.context)
                if fitted is not None:
                    yield self.records.cell(slot, draft, fitted)
            else:
                raise CompileError(f"the {self.family.name} task family reads no haystack, but gave a Fill draft")

    def _filled_trial(self, scope: _Pass, model: Model, trial: int) -> Iterator[Cell]:
        """A model's trial of a family that fills a haystack: its haystack (the spec's, or a task's variant of it)
        tokenised once."""
        for variant, prompt in self.variants:
            prompt = model_prompt(prompt, model)
            for length in scope.lengths:
                if not self._takes(model, length, scope.lengths):
                    continue
                for point, task in self.tasks:
                    slot = ModelSlot(model, variant, prompt, length, trial, point, task)
                    drafts = task.drafts(self._family_slot(slot))
                    if not scope.read_haystack:
                        self.fill.check_room(slot, drafts)
                        continue
                    tt, start = self.texts.text(model.tokenizer, trial, task.haystack or self.source)
                    slot = ModelSlot(model, variant, prompt, length, trial, point, task, tt, start)
                    yield from self.fill.cells(slot, drafts)

    def _family_slot(self, slot: ModelSlot) -> Slot:
        return Slot(slot.variant, slot.length, slot.trial, self.seed, slot.model.count)

    def _takes(self, model: Model, length: int, lengths: list[int]) -> bool:
        """Whether the model's max_context holds the length; one that does not is an error, or the cells it would
        have had there are counted as dropped (by arithmetic: `Task.cells`; a published prompt goes to a length the
        model takes, if it takes any)."""
        if model.max_context is None or length <= model.max_context:
            return True
        if self.on_too_long == "error":
            raise CompileError(
                f"cell {model.label} at context length {length} exceeds the model's max_context "
                f"({model.max_context}); shorten grid.context_lengths or set run.on_too_long: drop"
            )
        limit = model.max_context
        earlier = lengths[: lengths.index(length)]
        before = [n for n in lengths if n <= limit] + [n for n in earlier if n > limit]

        def cells(some: list[int]) -> int:
            return sum(task.cells(some) for _, task in self.tasks) if some else 0

        self.stats.dropped[model.label] += cells([*before, length]) - cells(before)
        return False
