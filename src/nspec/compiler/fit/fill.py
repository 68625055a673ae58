"""`Fill` drafts: the trial's haystack cut to the slot's length with the draft's inserts placed, exactly, in the
model's tokens — by its tokenizer (`compiler.context`), or by the provider's own counts where calibrate has them
(`compiler.count_fitting`) — and shaped for the provider's prompt cache (`fit.cache_groups`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from nspec.errors import CellError, CompileError
from nspec.templates import render

from ..caching import control_nonce
from ..context import (
    BuiltContext,
    PromptParts,
    build_context,
    build_on_span,
    build_token_context,
    haystack_room,
    needles_keep,
)
from ..count_fitting import CellPlan, CountedSlot
from ..counts_file import Counter
from ..haystack import SourceUse
from ..models import ModelSlot
from ..record import Cell, Records
from ..stats import CompileStats
from ..tasks import Draft, Fill
from .cache_groups import CacheGroups
from .measure import Fitted, ReferenceCounts, estimated

_HAYSTACK_MARK = "\x00haystack\x00"
# A needle further than this (in points of depth) from where it was asked to go is reported: in a short context of
# long sentences the nearest sentence boundary can be that far.
FAR_FROM_DEPTH = 5.0


@dataclass
class FillCell:
    """A family's `Fill` draft with what the framework adds: its id, its prompt around the haystack, and its cache
    arm."""

    draft: Draft
    cell_id: str
    parts: PromptParts
    control: bool = False  # in the cache control arm

    @property
    def fill(self) -> Fill:
        assert isinstance(self.draft.context, Fill)
        return self.draft.context


def prompt_parts(slot: ModelSlot, question: str) -> PromptParts:
    """The cell's prompt around its haystack, as its model gets it (`nspec.compiler.providers.contract.as_sent`)."""
    prompt, model = slot.prompt, slot.model
    values = {"question": question}
    user = render(prompt["user"], {**values, "haystack": _HAYSTACK_MARK})
    prefix, suffix = user.split(_HAYSTACK_MARK)
    parts = PromptParts(
        system=render(prompt["system"], values) if "system" in prompt else None,
        prefix=prefix,
        suffix=suffix,
        prefill=render(prompt["prefill"], values) if "prefill" in prompt else None,
        reserve=slot.reserve,
        question_message=render(prompt["question_message"], values) if "question_message" in prompt else None,
    )
    return parts if model.api.takes_prefill(model.entry) else parts.folded()


class FillFitter:
    """Fits the `Fill` drafts of a compile. ``by_tokens``: needlehaystack's cut and placement
    (`boundary: period-token`); ``separator``: a stack's, between whose items it is cut; ``use`` counts how often a
    source repeats within a cell, refused where ``refuse_repetition`` (`haystack.repeat: error`)."""

    def __init__(
        self,
        records: Records,
        stats: CompileStats,
        caching: CacheGroups,
        by_tokens: bool,
        separator: str | None,
        refuse_repetition: bool,
    ) -> None:
        self.records, self.stats, self.caching = records, stats, caching
        self.by_tokens, self.separator, self.refuse_repetition = by_tokens, separator, refuse_repetition
        # The o200k counts of cells' records, made where records are written (validate and plan never read them).
        self.references = ReferenceCounts() if records.requests else None
        self._aims: dict[str, tuple[float, int]] = {}  # per calibrated model: `CountedSlot.aim`, last seen

    def prepare(self, slot: ModelSlot, draft: Draft) -> FillCell:
        """A family's draft with its prompt parts and its cache arm."""
        if not isinstance(draft.context, Fill):
            raise CompileError(f"the {self.records.family} task family reads a haystack, but gave a draft without Fill")
        parts = prompt_parts(slot, draft.question)
        cell = FillCell(draft, self.records.cell_id(slot, draft), parts)
        policy = slot.model.cache
        if policy is not None and self.caching.is_control(policy, cell.cell_id):
            cell.control = True
            if policy.style.kind == "prefix":  # the provider caches by itself: start the prompt with a nonce
                nonce = control_nonce(cell.cell_id)
                cell.parts = (
                    replace(parts, system=nonce + parts.system)
                    if parts.system is not None
                    else replace(parts, prefix=nonce + parts.prefix)
                )
        return cell

    def cells(self, slot: ModelSlot, drafts: Iterable[Draft]) -> Iterator[Cell]:
        """The slot's cells, fitted by the provider's counts where calibrate has them, else by the tokenizer."""
        prepared = (self.prepare(slot, draft) for draft in drafts)
        counter = slot.model.counter
        if counter is None or self.by_tokens:
            yield from self._proxy_cells(slot, prepared)
        else:
            yield from self._counted_cells(slot, list(prepared), counter)

    def check_room(self, slot: ModelSlot, drafts: Iterable[Draft]) -> None:
        """What fitting refuses of the drafts before it reads the haystack: a prompt and inserts alone longer than
        the length (validate)."""
        model = slot.model
        for cell in (self.prepare(slot, draft) for draft in drafts):
            target = model.fit_target(slot.length, cell.parts.reserve)
            try:
                if self.by_tokens:
                    needles_keep(model.tokenizer, cell.parts, cell.fill.inserts, target)
                else:
                    haystack_room(model.tokenizer, cell.parts, cell.fill.inserts, target, self.separator)
            except CompileError as exc:
                raise self._cell_error(slot, cell, exc) from None

    def _proxy_cells(self, slot: ModelSlot, cells: Iterable[FillCell]) -> Iterator[Cell]:
        """The slot's cells fitted by the model's tokenizer. The questions asked of one context share it exactly
        (a prompt cache reads it only so): its span is fitted once, for the question that takes the most tokens."""
        context: list[FillCell] = []
        for cell in cells:
            context.append(cell)
            if cell.draft.siblings_ahead:
                continue
            if len(context) == 1 or self.by_tokens:  # by tokens, every question's span is the same already
                yield from (self._cell(slot, c, self._proxy_context(slot, c)) for c in context)
            else:
                tokenizer = slot.model.tokenizer
                widest = max(
                    context,
                    key=lambda c: tokenizer.own_count(c.parts.prefix + c.parts.suffix + "".join(c.parts.others())),
                )
                span = self._proxy_context(slot, widest).span
                target = slot.model.fit_target(slot.length, widest.parts.reserve)
                for sibling in context:
                    built, _ = build_on_span(
                        slot.tt, tokenizer, sibling.parts, sibling.fill.inserts, span, target, self.separator
                    )
                    yield self._cell(slot, sibling, built)
            context = []

    def _proxy_context(self, slot: ModelSlot, cell: FillCell) -> BuiltContext:
        """The cell fitted by its model's tokenizer (inside a proxy's margin of max_context)."""
        model = slot.model
        target = model.fit_target(slot.length, cell.parts.reserve)
        inserts = cell.fill.inserts
        try:
            if self.by_tokens:
                return build_token_context(slot.tt, model.tokenizer, slot.start, cell.parts, inserts, target)
            return build_context(slot.tt, model.tokenizer, slot.start, cell.parts, inserts, target, self.separator)
        except CompileError as exc:
            raise self._cell_error(slot, cell, exc) from None

    def _cell_error(self, slot: ModelSlot, cell: FillCell, exc: CompileError) -> CellError:
        return CellError(f"cell {cell.cell_id} ({slot.model.label}, length {slot.length}): {exc}")

    def _counted_cells(self, slot: ModelSlot, cells: list[FillCell], counter: Counter) -> Iterator[Cell]:
        """The slot's cells fitted and counted in the provider's counts; estimated by the proxy when the counts
        file lacks a count they need."""
        model = slot.model
        base = prompt_parts(slot, "")
        aim = self._aims.get(model.label)
        counted = CountedSlot(slot.tt, model.tokenizer, slot.start, base, slot.length, self.separator, counter, aim)
        try:
            built = counted.build([CellPlan(c.parts, c.fill.inserts) for c in cells])
        except CompileError as exc:
            raise CellError(f"cells of {model.label} at length {slot.length}: {exc}") from None
        if counted.aim is not None:
            self._aims[model.label] = counted.aim
        if built is None:
            self.stats.uncounted[model.label] += len(cells)
            yield from (self._cell(slot, cell, self._proxy_context(slot, cell)) for cell in cells)
            return
        for cell, context in zip(cells, built, strict=True):
            yield self._cell(slot, cell, context, counter)

    def _cell(self, slot: ModelSlot, cell: FillCell, built: BuiltContext, counter: Counter | None = None) -> Cell:
        """The cell of a fitted context; with ``counter``, its count is the provider's: the whole cell's where
        calibrate counted it, else the composed one (exact unless calibrate refuted composing)."""
        model, parts, draft = slot.model, cell.parts, cell.draft
        needles = cell.fill.needles
        for needle, actual in zip(needles, built.depths, strict=True):
            needle["depth_actual"] = actual
            if abs(actual - needle["depth_requested"]) > FAR_FROM_DEPTH:
                self.stats.far[model.label] += 1
        uses = self._uses(slot, built.span, cell.cell_id)
        prompt = parts.prompt(built.user)
        request = self.records.request(slot, cell.cell_id, prompt, parts.reserve)
        tokens, exact, composed = built.tokens, model.tokenizer.exact, None
        if counter is not None:
            assert request is not None
            composed, whole = built.tokens, counter.known_line(request)
            tokens = composed if whole is None else whole
            exact = whole is not None or counter.composes
            how = {"counted_by": counter.known.counted_by}
            if not exact:
                self.stats.inexact[model.label] += 1
        else:
            how = estimated(model, slot.length, parts.reserve, self.stats)
        extra: dict[str, object] = {}
        if draft.question_index is not None:
            extra["question_index"] = draft.question_index
        opens_group = None
        if model.cache is not None:
            shape = (cell.cell_id, parts, cell.control)
            cut, opens_group = self.caching.cut(slot, prompt_parts(slot, ""), draft, shape, built)
            if request is not None and self.records.requests:
                request = model.api.shape_cache(request, prompt, cut)
            extra["cache"] = cut.record()
        reference = None
        if model.tokenizer.encoding_name == "o200k_base":
            reference = built.own_tokens  # counted so already (a proxy's factor comes after)
        elif self.references is not None:
            reference = self.references.reference_tokens(slot.tt, built, parts.others())
        fitted = Fitted(
            prompt=prompt,
            tokens=tokens,
            exact=exact,
            reserve=parts.reserve,
            counted=how,
            haystack_tokens=built.haystack_tokens,
            reference_tokens=reference,
            question=draft.question,
            expected=draft.expected,
            data=draft.data,
            needles=needles,
            haystack_uses=uses,
            extra=extra,
            request=request,
            composed=composed,
            opens_group=opens_group,
        )
        return self.records.cell(slot, draft, fitted)

    def _uses(self, slot: ModelSlot, span: tuple[int, int], cid: str) -> int:
        """The most times one source appears in the cell's haystack (1: none repeats), counted for the manifest."""
        tt = slot.tt
        assert tt.layout is not None
        use: SourceUse = self.stats.use
        uses = use.add(tt.layout, tt.starts[span[0]], tt.starts[span[1]])
        if uses > 1:
            self.stats.repeating[slot.model.label] += 1
            if self.refuse_repetition:
                raise CellError(
                    f"cell {cid} ({slot.model.label}, length {slot.length}) needs {span[1] - span[0]:,} haystack "
                    f"tokens, but its sources hold {tt.pass_tokens:,} (in {slot.model.tokenizer.name} tokens), so "
                    f"they would repeat ({uses} times); haystack.repeat is `error`: use a larger haystack (e.g. "
                    "corpus: [austen, kjv]), shorter context lengths, or `repeat: allow`"
                )
        return uses
