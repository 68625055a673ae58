"""From a resolved spec to cells: one record and one request line at a time, in a fixed order.

The spec's task family (`compiler.tasks`) makes the drafts of each slot; this module fits them to their lengths and
makes their records and request lines, one code path for every family: a `Fill` draft's haystack cut to the length
with its inserts placed (exactly, in the model's tokens), a `Sized` draft built at the largest size that fits, a
`Fixed` draft placed at the smallest grid length it fits.

Order: trial, then model, prompt variant, context length, `grid.params` point, then the family's order (for needles:
depth, with the negative controls last). Memory holds the tokenised haystack of the current trial per tokenizer,
never the run.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from nspec.compiler.providers.contract import CacheCut, Provider, as_sent
from nspec.compiler.providers.registry import provider as provider_api
from nspec.errors import CellError, CompileError
from nspec.inputs import Confinement
from nspec.prompt import Prompt, Turn
from nspec.templates import render

from . import grid as grid_axes
from .caching import CachePlanner, CachePolicy, CellPrefix, build_ladder, cache_policy, control_nonce
from .context import (
    BuiltContext,
    Insert,
    PromptParts,
    build_context,
    build_on_span,
    build_token_context,
    fixed_tokens,
    haystack_room,
    needles_keep,
)
from .count_fitting import CellPlan, CountedSlot
from .counts_file import Counter, CountsFile, Fetch, ModelCounts
from .draws import Draws
from .haystack import HaystackSource, Layout, SourceUse, TokenizedText, trial_order
from .tasks import Draft, Fill, Fixed, ParamError, Setup, Sized, Slot, Task, registry
from .tasks.ruler.base import Built, largest_fitting, largest_within
from .tokenizers import Tokenizer, chat_framing, encoding

_HAYSTACK_MARK = "\x00haystack\x00"
_CLEAN_LINE_START = re.compile(r"(?<=\n)(?=[A-Za-z0-9])")  # a clean cut point (`compiler.haystack`)
# A needle further than this (in points of depth) from where it was asked to go is reported: in a short context of
# long sentences the nearest sentence boundary can be that far.
FAR_FROM_DEPTH = 5.0


@dataclass
class Model:
    """A model entry of the resolved spec, with what compiling needs of it."""

    label: str
    model_id: str
    provider: str
    name: str
    mode: str
    params: dict[str, Any]
    max_context: int | None
    tokenizer: Tokenizer
    prompt_override: dict[str, Any]
    entry: dict[str, Any] = field(repr=False)
    api: Provider = field(repr=False)  # what its provider knows: request lines, limits, modes
    counter: Counter | None = field(default=None, repr=False)  # the provider's counts, once calibrated
    cache: CachePolicy | None = None  # how its requests are shaped for the provider's prompt cache

    def count(self, text: str) -> int:
        """``text``'s tokens as this model counts them (its tokenizer's, scaled where it is a proxy)."""
        return self.tokenizer.scale(self.tokenizer.own_count(text))

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "-", self.label).strip("-")[:40] or "model"


# The haystack of a family that reads none.
_NO_HAYSTACK = HaystackSource("none", [], "", "none", "")
# Keys of a cell's identity that are the framework's: a family's drafts may not use them.
FRAMEWORK_KEYS = frozenset(("model", "variant", "length", "trial", "params"))
# The identity keys that have fields of their own in a cell's record; a family's other axes go in `axes`.
RECORDED_AXES = ("depth", "repeat", "item")


@dataclass(frozen=True)
class _Slot:
    """What every cell of one model, prompt variant, length, trial and `grid.params` point shares."""

    model: Model
    haystack: TokenizedText | None  # the trial's tokenised haystack (families whose drafts are `Fill`)
    start: int  # the trial's first haystack token
    variant: str | None
    prompt: dict[str, Any]
    length: int
    trial: int
    point: dict[str, Any]  # the `grid.params` point
    task: Task

    @property
    def tt(self) -> TokenizedText:
        assert self.haystack is not None, "a Fill draft of a family that reads no haystack"
        return self.haystack


@dataclass
class Cell:
    record: dict[str, Any]  # the cells.jsonl line
    request: dict[str, Any] | None  # the provider batch input line (None when the maker counts without building)
    model: Model
    composed: int | None = None  # the count composed from the provider's counts (calibrate checks it)
    opens_group: tuple[int, int] | None = None  # first of a cache group: the group's forecast requests and bytes


@dataclass
class _Draft:
    """A family's `Fill` draft with what the framework adds: its whole identity, its prompt around the haystack,
    and its cache arm."""

    made: Draft
    identity: dict[str, Any]
    parts: PromptParts
    control: bool = False  # in the cache control arm

    @property
    def fill(self) -> Fill:
        assert isinstance(self.made.context, Fill)
        return self.made.context

    @property
    def inserts(self) -> list[Insert]:
        return self.fill.inserts

    @property
    def needles(self) -> list[dict[str, Any]]:
        return self.fill.needles

    @property
    def siblings_ahead(self) -> int:
        return self.made.siblings_ahead


def models_of(
    spec: dict[str, Any], counts: CountsFile | None = None, fetch: dict[str, Fetch] | None = None
) -> list[Model]:
    """The spec's models; a model whose provider counts tokens gets a `Counter` when ``counts`` has its counts
    (compile) or ``fetch`` a way to ask for them (calibrate)."""
    out = []
    for entry in spec["models"]:
        provider, name = entry["id"].split("/", 1)
        api = provider_api(provider)
        params = dict(entry.get("params", {}))
        counter = None
        if api.counts_tokens and ((counts and entry["id"] in counts.models) or (fetch and entry["id"] in fetch)):
            known = (counts.models.get(entry["id"]) if counts else None) or ModelCounts(f"{provider} count_tokens")
            counter = Counter(api, entry, params, known, (fetch or {}).get(entry["id"]))
        out.append(
            Model(
                cache=cache_policy(spec.get("cache"), entry, api),
                label=entry.get("name", entry["id"]),
                model_id=entry["id"],
                provider=provider,
                name=name,
                mode=entry.get("mode", "auto"),
                params=params,
                max_context=entry.get("max_context"),
                tokenizer=api.tokenizer(entry.get("base_model", name), entry.get("tokenizer")),
                prompt_override=dict(entry.get("prompt", {})),
                entry=entry,
                api=api,
                counter=counter,
            )
        )
    return out


def prompt_variants(spec: dict[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
    if "prompts" in spec:
        return [(p["name"], p) for p in spec["prompts"]]
    return [(None, spec.get("prompt", {}))]  # a family that writes its own prompt needs none


def cell_id(model: Model, identity: dict[str, Any]) -> str:
    """Deterministic from the cell's identity; also the custom_id (^[A-Za-z0-9_-]{1,64}$)."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return f"{model.slug}-{digest[:16]}"


class CellMaker:
    """Makes every cell of a resolved spec; holds the tokenised haystacks it needs."""

    def __init__(
        self,
        spec: dict[str, Any],
        source: HaystackSource | None,
        counts: CountsFile | None = None,
        fetch: dict[str, Fetch] | None = None,
        base_dir: str = ".",
        confinement: Confinement | None = None,
    ) -> None:
        self.spec = spec
        self.seed: int = spec.get("seed", 0)
        self.family = registry.family(registry.named(spec))
        self.fills = self.family.needs_haystack  # its drafts are `Fill`: a haystack is cut to each length
        if self.fills and source is None:
            raise CompileError(f"the {self.family.name} task family places its content in a haystack: give one")
        params = registry.params_of(spec)
        self.swept = bool(registry.sweeps(spec))
        self.task_files: list[dict[str, Any]] = []  # the files the family read (a data set): into the compile hash
        self.tasks = []
        for point in registry.points(spec):
            setup = Setup(spec, {**params, **point}, source if self.fills else None, self.seed, base_dir, confinement)
            try:
                self.tasks.append((point, self.family.task(setup)))
            except ParamError as exc:
                exc.point = point
                raise
            self.task_files += [f for f in setup.files if f not in self.task_files]
        self.models = models_of(spec, counts, fetch)
        if not self.fills:
            for model in self.models:
                model.cache = None  # no haystack shared between cells: nothing to cache
        self.variants = prompt_variants(spec)
        self.lengths = grid_axes.context_lengths(spec["grid"]["context_lengths"])
        self.trials: int = spec["grid"].get("trials", 1)
        self.on_too_long: str = spec.get("run", {}).get("on_too_long", "error")
        self.source: HaystackSource = source if source is not None and self.fills else _NO_HAYSTACK
        self.is_stack = self.source.kind == "stack"
        # `period-token`: needlehaystack's cut and placement (`build_token_context`), counted by the tokenizer
        self.by_tokens = spec.get("haystack", {}).get("boundary") == "period-token"
        self.dropped: dict[str, int] = {}
        # Repetition of the sources within a cell: counted always, refused with `haystack.repeat: error` (noise
        # repeats its few sentences by design).
        self.use = SourceUse(len(self.source.documents))
        repeat = spec.get("haystack", {}).get("repeat", "allow")
        self.refuse_repetition = repeat == "error" and self.source.kind != "noise"
        self.unplaced: dict[str, int] = {}  # per model: `Fixed` drafts that fit no grid length
        self.repeating: dict[str, int] = {}  # per model: cells whose haystack holds a source more than once
        self.capped: dict[str, int] = {}  # per model: cells shortened to keep a proxy's margin inside max_context
        self.far: dict[str, int] = {}  # per model: needles more than FAR_FROM_DEPTH points from their depth
        self.uncounted: dict[str, int] = {}  # per calibrated model: cells whose counts the counts file lacks
        self.inexact: dict[str, int] = {}  # per calibrated model: cells counted only by composition it refuted
        self.aims: dict[str, tuple[float, int]] = {}  # per calibrated model: `CountedSlot.aim`, last seen
        self.pass_tokens: dict[str, int] = {}  # per encoding: tokens of one pass over the sources, where tokenised
        self._texts: dict[tuple[str, Any, str], TokenizedText] = {}  # per encoding, trial and haystack
        self._o200k_pieces: dict[str, int] = {}  # see `_o200k_count`
        self._fixed_tokens: dict[tuple[str, ...], tuple[int, bool]] = {}  # a Fixed draft's count, per model
        self._sizes: dict[tuple[str, str, int, str], int] = {}  # a Sized draft's size, per model, length and draft
        # The grid index the last search found per prompt variant, length and draft: where the next model's search
        # of the same sample starts. A hint only: a search finds the same size from anywhere, in fewer counts from
        # close by.
        self._searched: dict[tuple[str, int, str], int | None] = {}
        # validate: a generated context is built at its smallest size only, which is all a refusal depends on (a
        # size that fits there means some size fits; generators refuse only sizes too small for what they hold).
        self.smallest_sizes = False
        self.caching = CachePlanner(self.seed)
        self._heads: dict[str, int] = {}  # per cache group: tokens before the haystack (own units)
        # False: cells are counted without building their request lines (a plan), except where a counts file is
        # looked up by the line.
        self.build_requests = True
        # False: no haystack is tokenised and no cell made of it; `fit_check` checks each Fill draft's prompt and
        # inserts against its length (`haystack_room`), what compile refuses before it reads the haystack.
        self.read_haystack = True

    def count(self) -> int:
        """How many cells the grid makes, by arithmetic (nothing is built): what the cell cap is checked against
        before any work. Cells that `run.on_too_long: drop` would drop are counted."""
        per_model = sum(task.cells(self.lengths) for _, task in self.tasks)
        return self.trials * len(self.models) * len(self.variants) * per_model

    # -- haystack text -------------------------------------------------------------------------------------------

    def _text(self, tokenizer: Tokenizer, trial: int, source: HaystackSource) -> TokenizedText:
        shuffled = source.vary == "shuffle" and trial > 0
        key = (tokenizer.encoding_name, trial if shuffled else "all", source.digest)
        if key not in self._texts:
            if shuffled:  # only the current trial's shuffled texts are kept
                for old in [k for k in self._texts if k[1] != "all"]:
                    del self._texts[old]
            self._texts[key] = self._tokenize(tokenizer, trial_order(source, self.seed, trial), source)
            tt = self._texts[key]
            if tt.layout is not None and len(tt.data) >= tt.layout.pass_bytes:  # the text holds a whole pass
                self.pass_tokens.setdefault(tokenizer.encoding_name, tt.pass_tokens)
        return self._texts[key]

    def _tokenize(self, tokenizer: Tokenizer, order: list[int], source: HaystackSource) -> TokenizedText:
        """Join the documents (repeated as often as needed) and tokenise them once."""
        longest = max(self.lengths)
        sep = source.separator
        docs = [source.documents[i] for i in order]
        one_pass = sum(len(d.encode()) for d in docs) + len(sep.encode()) * len(docs)
        offset_room = one_pass if source.vary == "offset" and self.trials > 1 else 0
        want_bytes = offset_room + longest * 6 + 4096
        while True:
            parts: list[str] = []
            starts: list[int] = []
            size = 0
            i = 0
            while size < want_bytes:
                if parts:
                    parts.append(sep)
                    size += len(sep.encode())
                starts.append(size)
                doc = docs[i % len(docs)]
                parts.append(doc)
                size += len(doc.encode())
                i += 1
            text = "".join(parts)
            if not self.is_stack and len(text) > want_bytes:
                # The last document overshoots by up to a whole novel: tokenise only up to the line end after the
                # bytes wanted (some tokenizers, llama.cpp's among them, take seconds per megabyte).
                end = text.find("\n", want_bytes)
                text = text if end < 0 else text[: end + 1]
            n = len(docs)
            ends = [start + len(doc.encode()) for start, doc in zip(starts[:n], docs, strict=False)]
            layout = Layout(starts[:n], ends, order[: len(ends)], one_pass)
            tt = TokenizedText(text, tokenizer, starts if self.is_stack else None, layout)
            if tt.n_tokens - tt.token_at_byte(offset_room) >= longest + 64:
                tt.pass_tokens = tt.token_at_byte(min(one_pass, len(tt.data)))
                return tt
            want_bytes *= 2

    def _start(self, tt: TokenizedText, trial: int) -> int:
        if self.source.vary != "offset" or trial == 0:
            return 0
        wanted = Draws(self.seed, "haystack-offset", trial).below(max(1, tt.pass_tokens))
        return tt.last("boundary", wanted, 0)

    # -- cells ---------------------------------------------------------------------------------------------------

    def cells(self) -> Iterator[Cell]:
        for trial in range(self.trials):
            if self.fills:
                for model in self.models:
                    yield from self._model_trial(model, trial)
            else:
                yield from self._generated_trial(trial)

    def _generated_trial(self, trial: int) -> Iterator[Cell]:
        """A trial of a family that makes its contexts: each sample's models one after another, so that they share
        the sample's generator, builds and counts (RULER's models build the same text, bar its last line)."""
        for variant, prompt in self.variants:
            prompts = {m.label: _model_prompt(prompt, m) for m in self.models}
            for length in self.lengths:
                models = [m for m in self.models if self._takes(m, length)]
                for point, task in self.tasks:
                    for model in models:
                        slot = _Slot(model, None, 0, variant, prompts[model.label], length, trial, point, task)
                        made = task.drafts(Slot(variant, length, trial, self.seed, model.count))
                        yield from self._generated_cells(slot, made)

    def _takes(self, model: Model, length: int) -> bool:
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
        earlier = self.lengths[: self.lengths.index(length)]
        before = [n for n in self.lengths if n <= limit] + [n for n in earlier if n > limit]

        def cells(lengths: list[int]) -> int:
            return sum(task.cells(lengths) for _, task in self.tasks) if lengths else 0

        self.dropped[model.label] = self.dropped.get(model.label, 0) + cells([*before, length]) - cells(before)
        return False

    def _model_trial(self, model: Model, trial: int) -> Iterator[Cell]:
        self._o200k_pieces.clear()
        texts: dict[str, tuple[TokenizedText, int]] = {}

        def text(task: Task) -> tuple[TokenizedText | None, int]:
            """The trial's tokenised haystack of a task, and its first token: the spec's, or the task's own
            variant of it (`Task.haystack`, e.g. sentence-shuffled)."""
            source = getattr(task, "haystack", None) or self.source
            if source.digest not in texts:
                tt = self._text(model.tokenizer, trial, source)
                texts[source.digest] = (tt, self._start(tt, trial))
            return texts[source.digest]

        for variant, prompt in self.variants:
            prompt = _model_prompt(prompt, model)
            for length in self.lengths:
                if not self._takes(model, length):
                    continue
                for point, task in self.tasks:
                    tt, start = text(task) if self.read_haystack else (None, 0)
                    slot = _Slot(model, tt, start, variant, prompt, length, trial, point, task)
                    made = task.drafts(Slot(variant, length, trial, self.seed, model.count))
                    drafts = (self._draft(slot, draft) for draft in made)
                    if not self.read_haystack:
                        for draft in drafts:
                            self._room(slot, draft)
                        continue
                    if model.counter is None or self.by_tokens:
                        yield from self._proxy_cells(slot, drafts)
                    else:
                        yield from self._counted_cells(slot, list(drafts), model.counter)

    def _fit_target(self, model: Model, length: int, reserve: int) -> int:
        """The length a cell is fitted to: the grid's, or less for a model counted by a proxy whose real count may be
        up to its tokenizer's margin higher, so that the real prompt still fits the model's max_context."""
        margin = model.tokenizer.margin
        if model.max_context is None or not margin:
            return length
        return min(length, int((model.max_context - reserve) / (1 + margin)) + reserve)

    def _reference_tokens(self, model: Model, parts: PromptParts, built: BuiltContext) -> int:
        """The request in o200k_base tokens with OpenAI's chat framing: one reference for every model, so lengths
        compare across tokenizers."""
        if model.tokenizer.encoding_name == "o200k_base":
            return built.own_tokens  # counted so already (a proxy's factor comes after)
        texts = [built.user, *parts.others()]
        return chat_framing(len(texts)) + sum(self._o200k_count(t) for t in texts)

    def _o200k_count(self, text: str) -> int:
        """o200k_base tokens of ``text``, counted a piece at a time between line starts that are clean cut points
        (a letter or digit after a newline), each piece's count kept for the trial: the cells of a grid share most
        of their haystack, so only the pieces around their needles and their ends are new."""
        o200k, kept = encoding("o200k_base"), self._o200k_pieces
        total = 0
        for piece in _CLEAN_LINE_START.split(text):
            count = kept.get(piece)
            if count is None:
                count = kept[piece] = o200k.count(piece)
            total += count
        return total

    def _uses(self, slot: _Slot, span: tuple[int, int], cid: str) -> int:
        """The most times one source appears in the cell's haystack (1: none repeats), counted for the manifest."""
        tt = slot.tt
        assert tt.layout is not None
        uses = self.use.add(tt.layout, tt.starts[span[0]], tt.starts[span[1]])
        if uses > 1:
            self.repeating[slot.model.label] = self.repeating.get(slot.model.label, 0) + 1
            if self.refuse_repetition:
                raise CellError(
                    f"cell {cid} ({slot.model.label}, length {slot.length}) needs {span[1] - span[0]:,} haystack "
                    f"tokens, but its sources hold {tt.pass_tokens:,} (in {slot.model.tokenizer.name} tokens), so "
                    f"they would repeat ({uses} times); haystack.repeat is `error`: use a larger haystack (e.g. "
                    "corpus: [austen, kjv]), shorter context lengths, or `repeat: allow`"
                )
        return uses

    @staticmethod
    def _parts(slot: _Slot, question: str) -> PromptParts:
        """The cell's prompt around its haystack, as its model gets it (`nspec.compiler.provider_registry.as_sent`)."""
        prompt, model = slot.prompt, slot.model
        values = {"question": question}
        user = render(prompt["user"], {**values, "haystack": _HAYSTACK_MARK})
        prefix, suffix = user.split(_HAYSTACK_MARK)
        parts = PromptParts(
            system=render(prompt["system"], values) if "system" in prompt else None,
            prefix=prefix,
            suffix=suffix,
            prefill=render(prompt["prefill"], values) if "prefill" in prompt else None,
            reserve=prompt.get("reserve_tokens", 300),
            question_message=render(prompt["question_message"], values) if "question_message" in prompt else None,
        )
        return parts if model.api.takes_prefill(model.entry) else parts.folded()

    def _identity(self, slot: _Slot, draft: Draft) -> dict[str, Any]:
        """The cell's whole identity: the framework's keys and the family's."""
        clash = FRAMEWORK_KEYS & set(draft.identity)
        if clash:
            raise CompileError(
                f"the {self.family.name} task family gives its drafts the identity key(s) {', '.join(sorted(clash))}, "
                "which are the framework's"
            )
        point = {"params": slot.point} if self.swept else {}
        return {"variant": slot.variant, "length": slot.length, "trial": slot.trial, **point, **draft.identity}

    def _draft(self, slot: _Slot, made: Draft) -> _Draft:
        """A family's Fill draft with its prompt parts and its cache arm."""
        if not isinstance(made.context, Fill):
            raise CompileError(f"the {self.family.name} task family reads a haystack, but gave a draft without Fill")
        parts = self._parts(slot, made.question)
        draft = _Draft(made, self._identity(slot, made), parts)
        policy = slot.model.cache
        if policy is not None and self.caching.is_control(policy, self._cell_id(slot, draft)):
            draft.control = True
            if policy.style.kind == "prefix":  # the provider caches by itself: start the prompt with a nonce
                nonce = control_nonce(self._cell_id(slot, draft))
                draft.parts = (
                    replace(parts, system=nonce + parts.system)
                    if parts.system is not None
                    else replace(parts, prefix=nonce + parts.prefix)
                )
        return draft

    def _cell_id(self, slot: _Slot, draft: _Draft) -> str:
        return cell_id(slot.model, {"model": slot.model.label, **draft.identity})

    def _proxy_cells(self, slot: _Slot, drafts: Iterable[_Draft]) -> Iterator[Cell]:
        """The slot's cells fitted by the model's tokenizer. The questions asked of one context share it exactly
        (a prompt cache reads it only so): its span is fitted once, for the question that takes the most tokens."""
        context: list[_Draft] = []
        for draft in drafts:
            context.append(draft)
            if draft.siblings_ahead:
                continue
            if len(context) == 1 or self.by_tokens:  # by tokens, every question's span is the same already
                yield from (self._cell(slot, d, self._proxy_context(slot, d)) for d in context)
            else:
                tokenizer = slot.model.tokenizer
                widest = max(
                    context,
                    key=lambda d: tokenizer.own_count(d.parts.prefix + d.parts.suffix + "".join(d.parts.others())),
                )
                span = self._proxy_context(slot, widest).span
                separator = self.source.separator if self.is_stack else None
                target = self._fit_target(slot.model, slot.length, widest.parts.reserve)
                for sibling in context:
                    built, _ = build_on_span(
                        slot.tt, tokenizer, sibling.parts, sibling.inserts, span, target, separator
                    )
                    yield self._cell(slot, sibling, built)
            context = []

    def _proxy_context(self, slot: _Slot, draft: _Draft) -> BuiltContext:
        """The cell fitted by its model's tokenizer (inside a proxy's margin of max_context)."""
        model = slot.model
        separator = self.source.separator if self.is_stack else None
        target = self._fit_target(model, slot.length, draft.parts.reserve)
        try:
            if self.by_tokens:
                return build_token_context(slot.tt, model.tokenizer, slot.start, draft.parts, draft.inserts, target)
            return build_context(slot.tt, model.tokenizer, slot.start, draft.parts, draft.inserts, target, separator)
        except CompileError as exc:
            raise self._cell_error(slot, draft, exc) from None

    def _room(self, slot: _Slot, draft: _Draft) -> None:
        """What `_proxy_context` refuses of the draft before it reads the haystack: its prompt and inserts alone
        longer than the length."""
        model = slot.model
        separator = self.source.separator if self.is_stack else None
        target = self._fit_target(model, slot.length, draft.parts.reserve)
        try:
            if self.by_tokens:
                needles_keep(model.tokenizer, draft.parts, draft.inserts, target)
            else:
                haystack_room(model.tokenizer, draft.parts, draft.inserts, target, separator)
        except CompileError as exc:
            raise self._cell_error(slot, draft, exc) from None

    def _cell_error(self, slot: _Slot, draft: _Draft, exc: CompileError) -> CellError:
        return CellError(f"cell {self._cell_id(slot, draft)} ({slot.model.label}, length {slot.length}): {exc}")

    def _counted_cells(self, slot: _Slot, drafts: list[_Draft], counter: Counter) -> Iterator[Cell]:
        """The slot's cells fitted and counted in the provider's counts; estimated by the proxy when the counts
        file lacks a count they need."""
        model = slot.model
        separator = self.source.separator if self.is_stack else None
        base = self._parts(slot, "")
        aim = self.aims.get(model.label)
        counted = CountedSlot(slot.tt, model.tokenizer, slot.start, base, slot.length, separator, counter, aim)
        try:
            built = counted.build([CellPlan(d.parts, d.inserts) for d in drafts])
        except CompileError as exc:
            raise CellError(f"cells of {model.label} at length {slot.length}: {exc}") from None
        if counted.aim is not None:
            self.aims[model.label] = counted.aim
        if built is None:
            self.uncounted[model.label] = self.uncounted.get(model.label, 0) + len(drafts)
            yield from (self._cell(slot, draft, self._proxy_context(slot, draft)) for draft in drafts)
            return
        for draft, context in zip(drafts, built, strict=True):
            yield self._cell(slot, draft, context, counter)

    # -- contexts the family generates (Sized) or brings (Fixed) --------------------------------------------------

    def _generated_cells(self, slot: _Slot, drafts: Iterable[Draft]) -> Iterator[Cell]:
        for made in drafts:
            if isinstance(made.context, Sized):
                yield self._sized_cell(slot, made, made.context)
            elif isinstance(made.context, Fixed):
                cell = self._fixed_cell(slot, made, made.context)
                if cell is not None:
                    yield cell
            else:
                raise CompileError(f"the {self.family.name} task family reads no haystack, but gave a Fill draft")

    def _system(self, slot: _Slot, made: Draft) -> str | None:
        prompt = slot.prompt
        return render(prompt["system"], {"question": made.question}) if "system" in prompt else None

    def _sized_cell(self, slot: _Slot, made: Draft, sized: Sized) -> Cell:
        """The draft built at the largest size whose prompt and answer budget fit the slot's length (RULER's
        search, in the model's tokens)."""
        model = slot.model
        reserve = sized.reserve or slot.prompt.get("reserve_tokens", 300)
        # The provider's counts are the model's own: no proxy's margin to keep inside max_context.
        target = slot.length if model.counter is not None else self._fit_target(model, slot.length, reserve)
        system = self._system(slot, made)
        tried: dict[int, tuple[Built, Prompt, int, bool]] = {}

        def at(size: int) -> tuple[Built, Prompt, int, bool]:
            if size not in tried:
                built = sized.build(size)
                prompt = _sized_prompt(model, system, built)
                tried[size] = (built, prompt, *self._prompt_tokens(model, prompt))
            return tried[size]

        def fits(size: int) -> bool:
            return at(size)[2] + reserve <= target

        key = (model.label, str(slot.variant), slot.length, json.dumps([slot.point, made.identity], sort_keys=True))
        smallest = sized.step if sized.search is None else sized.search.first
        if self.smallest_sizes:
            size = smallest if (sized.limit is None or smallest <= sized.limit) and fits(smallest) else 0
        elif sized.search is None:
            # The last sample's size at this length: most samples fit within a step of it, found in two or three
            # builds.
            size = largest_fitting(fits, sized.step, sized.limit, near=self._sizes.get(key))
            self._sizes[key] = size
        else:
            size = self._searched_size(key, slot, made, sized, target - reserve)
            while size > 0 and not fits(size):  # RULER takes a step off while the sample overflows
                size = size - sized.step if size > sized.step else 0
        if size == 0:
            cid = cell_id(model, {"model": model.label, **self._identity(slot, made)})
            raise CellError(
                f"cell {cid} ({model.label}, length {slot.length}): the {self.family.name} task at its smallest size "
                f"({smallest}) needs more than {target - reserve} tokens (the length less reserve_tokens {reserve})"
            )
        built, prompt, tokens, exact = at(size)
        expected = [*made.expected, *built.expected]
        data = {**made.data, **built.data}
        return self._generated_cell(slot, made, prompt, tokens, exact, expected, data, size, reserve)

    def _searched_size(self, key: tuple[str, str, int, str], slot: _Slot, made: Draft, sized: Sized, room: int) -> int:
        """The largest size on ``sized.search``'s grid at which its sample fits ``room`` tokens (0 if none does),
        found once per ``key``; the search starts from the size another model found on the same sample."""
        searched = self._sizes.get(key)
        if searched is None:
            search, model, system = sized.search, slot.model, self._system(slot, made)
            assert search is not None

            def size(k: int) -> int:  # the k-th size of the grid, from 1
                return search.first + (k - 1) * search.step

            def count(k: int) -> int:
                return self._prompt_tokens(model, _sized_prompt(model, system, search.build(size(k))))[0]

            last = None if sized.limit is None else (sized.limit - search.first) // search.step + 1
            k = largest_within(count, room, 1, last, self._searched.get(key[1:])) if last is None or last >= 1 else 0
            self._searched[key[1:]] = k or None
            searched = self._sizes[key] = size(k) if k else 0
        return searched

    def _fixed_cell(self, slot: _Slot, made: Draft, fixed: Fixed) -> Cell | None:
        """The draft's cell if the slot's length is the smallest grid length it fits; None otherwise (a draft that
        fits no length is counted, once, as unplaced)."""
        model = slot.model
        reserve = slot.prompt.get("reserve_tokens", 300)
        prompt = as_sent(model.api, model.entry, Prompt(self._system(slot, made), fixed.turns, fixed.prefix))
        key = (model.label, str(slot.variant), str(slot.trial), json.dumps([slot.point, made.identity], sort_keys=True))
        if key not in self._fixed_tokens:
            self._fixed_tokens[key] = self._prompt_tokens(model, prompt)
        tokens, exact = self._fixed_tokens[key]
        lengths = [n for n in self.lengths if model.max_context is None or n <= model.max_context]
        fits = (lambda n: n) if exact else (lambda n: self._fit_target(model, n, reserve))
        home = min((n for n in lengths if tokens + reserve <= fits(n)), default=None)
        if home is None and slot.length == max(lengths):
            self.unplaced[model.label] = self.unplaced.get(model.label, 0) + 1
        if home != slot.length:
            return None
        return self._generated_cell(slot, made, prompt, tokens, exact, made.expected, made.data, None, reserve)

    def _prompt_tokens(self, model: Model, prompt: Prompt) -> tuple[int, bool]:
        """A whole prompt's tokens as the model counts them — the provider's count where calibrate has it — and
        whether the count is exact."""
        if model.counter is not None:
            known = model.counter.prompt(prompt)
            if known is not None:
                return known, True
        tokenizer = model.tokenizer
        texts = prompt.texts()
        own = tokenizer.framing(len(texts), prompt.prefill is not None) + sum(tokenizer.own_count(t) for t in texts)
        return tokenizer.scale(own), tokenizer.exact

    def _generated_cell(
        self,
        slot: _Slot,
        made: Draft,
        prompt: Prompt,
        tokens: int,
        exact: bool,
        expected: list[str],
        data: dict[str, Any],
        size: int | None,
        reserve: int,
    ) -> Cell:
        model = slot.model
        identity = self._identity(slot, made)
        cid = cell_id(model, {"model": model.label, **identity})
        request = None
        if self.build_requests or model.counter is not None:
            request = model.api.request_line(model.entry, cid, prompt, model.params, reserve)
        length: dict[str, Any] = {"counted_by": model.tokenizer.name}
        if model.counter is not None:
            if exact:
                length = {"counted_by": model.counter.known.counted_by}
            else:
                self.uncounted[model.label] = self.uncounted.get(model.label, 0) + 1
        if not exact and model.tokenizer.margin:
            length["margin"] = model.tokenizer.margin
        target = self._fit_target(model, slot.length, reserve)
        if not exact and target < slot.length:
            length["fitted_to"] = target
            self.capped[model.label] = self.capped.get(model.label, 0) + 1
        texts = prompt.texts()
        context = model.tokenizer.scale(sum(model.tokenizer.own_count(t.text) for t in prompt.turns))
        record = {
            "cell_id": cid,
            "model": model.label,
            "model_id": model.model_id,
            "prompt": slot.variant,
            "context_length": {
                "target": slot.length,
                "actual": tokens + reserve,
                "prompt": tokens,
                "haystack": context,
                "o200k": chat_framing(len(texts)) + sum(encoding("o200k_base").count(t) for t in texts),
                "characters": sum(len(t) for t in texts),
                **length,
            },
            "tokens_exact": exact,
            "depth": {"requested": identity.get("depth"), "actual": None},
            "trial": slot.trial,
            "repeat": identity.get("repeat"),
            "item": identity.get("item"),
            "needles": [],
            "question": made.question,
            "expected": expected,
            "alternates": made.alternates,
            "negative": made.negative,
            "max_tokens": model.params.get("max_tokens", model.params.get("max_completion_tokens", reserve)),
            "haystack_uses": 0,
            **self._task_fields(slot, made, data),
            **({"size": size} if size is not None else {}),
        }
        return Cell(record, request, model)

    # -- the record -----------------------------------------------------------------------------------------------

    def _cell(self, slot: _Slot, draft: _Draft, built: BuiltContext, counter: Counter | None = None) -> Cell:
        """The cell's record and request line; with ``counter``, its count is the provider's: the whole cell's
        where calibrate counted it, else the composed one (exact unless calibrate refuted composing)."""
        model, parts, needles = slot.model, draft.parts, draft.needles
        reserve = parts.reserve
        cid = self._cell_id(slot, draft)
        for needle, actual in zip(needles, built.depths, strict=True):
            needle["depth_actual"] = actual
            if abs(actual - needle["depth_requested"]) > FAR_FROM_DEPTH:
                self.far[model.label] = self.far.get(model.label, 0) + 1
        uses = self._uses(slot, built.span, cid)
        request = None
        prompt = parts.prompt(built.user)
        if self.build_requests or counter is not None:
            request = model.api.request_line(model.entry, cid, prompt, model.params, reserve)
        tokens, exact, composed = built.tokens, model.tokenizer.exact, None
        length: dict[str, Any] = {"counted_by": model.tokenizer.name}
        if counter is not None:
            assert request is not None
            composed, whole = built.tokens, counter.known_line(request)
            tokens = composed if whole is None else whole
            exact = whole is not None or counter.composes
            length = {"counted_by": counter.known.counted_by}
            if not exact:
                self.inexact[model.label] = self.inexact.get(model.label, 0) + 1
        else:
            if model.tokenizer.margin:
                length["margin"] = model.tokenizer.margin
            target = self._fit_target(model, slot.length, reserve)
            if target < slot.length:
                length["fitted_to"] = target
                self.capped[model.label] = self.capped.get(model.label, 0) + 1
        max_tokens = model.params.get("max_tokens", model.params.get("max_completion_tokens", reserve))
        extra: dict[str, Any] = {}
        if draft.made.question_index is not None:
            extra["question_index"] = draft.made.question_index
        opens_group = None
        if model.cache is not None:
            cut, opens_group = self._cache_cut(slot, draft, built, cid)
            if self.build_requests:
                assert request is not None
                request = model.api.shape_cache(request, prompt, cut)
            extra["cache"] = cut.record()
        identity, made = draft.identity, draft.made
        record = {
            "cell_id": cid,
            "model": model.label,
            "model_id": model.model_id,
            "prompt": slot.variant,
            "context_length": {
                "target": slot.length,
                "actual": tokens + reserve,
                "prompt": tokens,
                "haystack": built.haystack_tokens,
                "o200k": self._reference_tokens(model, parts, built),
                "characters": sum(len(t) for t in prompt.texts()),
                **length,
            },
            "tokens_exact": exact,
            "depth": {"requested": identity.get("depth"), "actual": needles[0]["depth_actual"] if needles else None},
            "trial": slot.trial,
            "repeat": identity.get("repeat"),
            "item": identity.get("item"),
            "needles": needles,
            "question": made.question,
            "expected": made.expected,
            "alternates": made.alternates,
            "negative": made.negative,
            "max_tokens": max_tokens,
            "haystack_uses": uses,
            **self._task_fields(slot, made),
            **extra,
        }
        return Cell(record, request, model, composed, opens_group)

    def _task_fields(self, slot: _Slot, made: Draft, data: dict[str, Any] | None = None) -> dict[str, Any]:
        """What a cell's record holds of its family beyond the fields every cell has: the values of its axes
        that have no field of their own (and its `grid.params` point), and its data for the scorers (each only where
        there is some)."""
        axes = {a: made.identity[a] for a in self.family.axes if a in made.identity and a not in RECORDED_AXES}
        axes.update(slot.point)
        data = made.data if data is None else data
        return {**({"axes": axes} if axes else {}), **({"data": data} if data else {})}

    def _cache_cut(
        self, slot: _Slot, draft: _Draft, built: BuiltContext, cid: str
    ) -> tuple[CacheCut, tuple[int, int] | None]:
        """The cell's cache shape; its group is every cell of the model, trial and prompt variant. The first cell of
        a group also gets the group's forecast size (requests, bytes), so the group can be kept in one shard."""
        model, parts = slot.model, draft.parts
        assert model.cache is not None
        group = "\0".join([model.label, str(slot.variant), str(slot.trial)])
        base = self._parts(slot, "")
        opens = None if self.caching.known(group) else self._open_cache_group(slot, group, base)
        head = self._heads[group]
        scale = model.tokenizer.scale
        begin = built.span[0]
        # A needle at depth 100 moves the haystack's start, a question in the system prompt or before the haystack
        # changes what precedes it: such a cell shares only its context with its siblings.
        shares = begin == slot.start and (parts.system, parts.prefix) == (base.system, base.prefix)
        context_chars = len(built.user) - len(parts.suffix)
        context = cid
        if draft.made.question_index is not None:  # one of several questions asked of one context
            context = hashlib.sha256(f"{parts.system}\0{built.user[:context_chars]}".encode()).hexdigest()
        cell = CellPrefix(
            needle_tokens=scale(head + built.first_insert - begin),
            context_chars=context_chars,
            context_tokens=scale(head + built.haystack_tokens),
            context=context,
            siblings_ahead=draft.siblings_ahead,
            first_insert=built.first_insert if shares else None,
            forecast=self._forecast_insert(slot, draft.identity.get("depth"), draft.made.negative, head),
        )
        return self.caching.cut(model.cache, group, draft.control, cell), opens

    def _open_cache_group(self, slot: _Slot, group: str, base: PromptParts) -> tuple[int, int]:
        """A group's head tokens, its ladder (for providers that mark breakpoints) and the forecast of where its
        cells' first needles go, from the grid; returns the forecast of its requests and their bytes."""
        model = slot.model
        assert model.cache is not None
        head = self._heads[group] = fixed_tokens(model.tokenizer, base) + model.tokenizer.own_count(base.prefix)
        lengths = [n for n in self.lengths if model.max_context is None or n <= model.max_context]
        plan = [step for _, task in self.tasks for step in task.depth_plan()]  # every point's cells share the group
        forecast = [(self._forecast_insert(slot, d, d is None, head, n), cells) for n in lengths for d, cells in plan]
        ladder = None
        if model.cache.style.kind == "breakpoints":
            longest = max((self._haystack_room(slot, n, head) for n in lengths), default=0)
            ladder = build_ladder(slot.tt, slot.start, longest, len(base.prefix), head, model.tokenizer.scale)
        self.caching.open(group, ladder, forecast)
        # a request is about its haystack's bytes, plus the JSON around it
        per_token = len(slot.tt.data) / max(1, slot.tt.n_tokens)
        cells = sum(k for _, k in plan)
        size = sum(cells * (int(self._haystack_room(slot, n, head) * per_token * 1.02) + 1024) for n in lengths)
        return cells * len(lengths), size

    def _forecast_insert(
        self, slot: _Slot, depth: float | None, negative: bool, head: int, length: int | None = None
    ) -> int:
        """Where a cell's first needle is forecast to go, as a haystack token (-1: a needle at the very end, which
        moves the haystack's start)."""
        room = self._haystack_room(slot, slot.length if length is None else length, head)
        if negative or depth is None:
            return slot.start + room
        if depth >= 100 and not self.is_stack:
            return -1
        return slot.start + int(room * depth / 100)

    def _haystack_room(self, slot: _Slot, length: int, head: int) -> int:
        """About how many haystack tokens (the tokenizer's own) a cell of ``length`` holds."""
        reserve = slot.prompt.get("reserve_tokens", 300)
        per_token = slot.model.tokenizer.scale(1_000_000) / 1_000_000
        return max(0, int((length - reserve) / per_token) - head)


def _model_prompt(prompt: Mapping[str, Any], model: Model) -> dict[str, Any]:
    """A prompt variant with the model's overrides (an override of None removes the field)."""
    return {k: v for k, v in {**prompt, **model.prompt_override}.items() if v is not None}


def _sized_prompt(model: Model, system: str | None, built: Built) -> Prompt:
    """A sized build as its model is sent it: its history, its text as the last user turn, its answer prefix."""
    prompt = Prompt(system, (*built.history, Turn("user", built.text)), built.answer_prefix or None)
    return as_sent(model.api, model.entry, prompt)
