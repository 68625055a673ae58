"""The pipeline as a library: compile → submit → collect → score → report over a run directory, and `run` for all
of them. Each call is idempotent and resumable, returns a typed result, and reports progress as events
(`nspec.events`); nothing here prints or exits, so the CLI and a notebook run the same code, and a spec
compiled here gets the run id the CLI gives it (providers and their tokenizers come from the registry, not from
the CLI's start-up).

    compiled = compile_spec("specs/magic-number.yaml")
    sent = submit(compiled.path)              # uploads batches, runs live and local models
    got = collect(compiled.path, wait=True)   # downloads results, resubmits failures per the retry policy
    scored = score(compiled.path, wait=True)  # scorers, then judges for what they leave open
    page = report([compiled.path])
"""

from __future__ import annotations

import ctypes
import gc
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nspec.compiler.providers.contract import model_name
from nspec.compiler.run_writer import DEFAULT_MAX_CELLS
from nspec.compiler.tokenizers import encoding
from nspec.errors import UserError, writing
from nspec.events import Event, Listener, ignore
from nspec.runners import rehearsal

# Compile and plan live apart (they load no other stage's modules), and are part of the pipeline's API.
from nspec.runners.compiling import Compiled as Compiled
from nspec.runners.compiling import Planned as Planned
from nspec.runners.compiling import compile_spec, destinations, model_entries
from nspec.runners.compiling import plan_spec as plan_spec
from nspec.runners.export import Exported, export_vllm
from nspec.runners.grading.scoring import JUDGE_ERROR, verdict_counts
from nspec.runners.importer import Imported, import_results
from nspec.runners.model_check import check_models
from nspec.runners.run_store import Run, check_results, exclusive
from nspec.runners.session import Session, failure_summary, grade, set_scoring, stage_status, stages
from nspec.spec import load_spec
from nspec.spec.yamlsource import SourceMap, read_document


@dataclass(frozen=True)
class Sent:
    created: list[str]  # batch ids created now
    adopted: list[str]  # batch ids found again after an interruption
    pending: int  # requests not done yet
    failed: int  # requests that ended without an answer


@dataclass(frozen=True)
class Collected:
    collected: dict[str, int]  # results written now, per stage
    pending: int
    failed: int
    # Why requests ended without an answer: per error code, how many and the first one's message (it names the
    # batch a missing result was missing from).
    failures: dict[str, tuple[int, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Scored:
    counts: dict[str, int]  # cells per verdict ("pass", "fail", "undecided", "error", "undecided (judge error)")
    pending: int  # judge requests not done yet

    @property
    def judge_errors(self) -> int:
        """Cells without a verdict because too few judges gave one."""
        return self.counts.get(JUDGE_ERROR, 0)


@dataclass(frozen=True)
class Ran:
    path: Path
    sent: Sent
    collected: Collected
    scored: Scored | None = None  # None while answers are pending
    report: Path | None = None  # None until every answer and verdict is in
    pending: int = field(init=False)

    def __post_init__(self) -> None:
        pending = self.collected.pending + (self.scored.pending if self.scored else 0)
        object.__setattr__(self, "pending", pending)


def _announce(spec: dict[str, Any], events: Listener) -> None:
    """Say where requests will go before any is sent."""
    events(Event("destinations", detail="; ".join(str(d) for d in destinations(spec))))


@contextmanager
def _lock(run: str | Path, wait_lock: bool, events: Listener) -> Iterator[None]:
    """The run's lock (`runners.run_store.exclusive`): held by another process, `RunBusy`, or with ``wait_lock`` a
    `lock-wait` event and a wait. Storage faults of writes that do not name their file name the run directory."""
    with writing(run), exclusive(Path(run), wait_lock, lambda who: events(Event("lock-wait", detail=f"{run}: {who}"))):
        yield


def submit(
    run: str | Path,
    events: Listener = ignore,
    live_backoff: float = 0.5,
    wait_lock: bool = False,
    announce: bool = True,
    max_usd: float | None = None,
    source: SourceMap | None = None,
) -> Sent:
    """Upload and create the batches not yet created, and run live and local models; safe to repeat. First, a
    `destinations` event says where requests go (``announce``). With a budget (``max_usd``, else the spec's
    `budget.max_usd`), work whose estimate is over it is refused before anything is sent, and live calls stop
    when they have cost that much. A model its provider's list lacks is refused first (`runners.model_check`),
    located in ``source`` (the spec the user wrote), else in the run's spec.yaml."""
    with _lock(run, wait_lock, events):
        opened = Run(run)
        cap = budget(opened, max_usd)
        where = source or read_document(str(opened.paths.spec)).source
        check_models(opened, lambda i: where.value(("models", i, "id")))
        if announce:
            _announce(opened.spec, events)
        session = Session.open(str(run), live_backoff, events=events, max_usd=cap)
        try:
            progress = session.submit()
        finally:
            session.close()
    return Sent(progress.created, progress.adopted, progress.pending, progress.failed)


def collect(
    run: str | Path,
    wait: bool = False,
    events: Listener = ignore,
    live_backoff: float = 0.5,
    wait_lock: bool = False,
    max_wait: float | None = None,
    retry_errors: bool = False,
    resend_lost: bool = False,
) -> Collected:
    """Download finished results of every stage; resubmit failed and expired requests per the retry policy; fetch
    again results the results file lost. With ``wait``, poll until nothing is pending (giving up after
    ``max_wait`` seconds, or when the same failure keeps coming back: `StillFailing`). ``retry_errors`` first sends
    again the requests whose final result is an error trying again may fix; ``resend_lost``, those whose result was
    lost and cannot be fetched again."""
    collected: dict[str, int] = {}
    pending = failed = 0
    with _lock(run, wait_lock, events):
        for stage in stages(Run(run)):
            session = Session.open(str(run), live_backoff, stage=stage, events=events)
            try:
                if retry_errors:
                    session.retry_errors()
                if resend_lost:
                    session.resend_lost()
                progress = session.collect(wait, max_wait)
            finally:
                session.close()
            collected[stage] = progress.collected
            pending, failed = pending + progress.pending, failed + progress.failed
    return Collected(collected, pending, failed, failure_summary(Run(run)) if failed else {})


def collect_from(
    run: str | Path, output_file: str | Path, events: Listener = ignore, wait_lock: bool = False
) -> Imported:
    """Import results computed elsewhere (the output of `vllm run-batch` on the compiled request files)."""
    with _lock(run, wait_lock, events):
        return import_results(Run(run), Path(output_file))


def export(
    run: str | Path, shards: int, served_model_name: str | None, stage: str = "answers", models: Sequence[str] = ()
) -> Exported:
    """Write the stage's requests as files `vllm run-batch` reads (see `runners.export`)."""
    return export_vllm(Run(run), shards, served_model_name, stage, models)


def score(
    run: str | Path,
    wait: bool = False,
    events: Listener = ignore,
    live_backoff: float = 0.5,
    wait_lock: bool = False,
    max_wait: float | None = None,
) -> Scored:
    """Grade every answer: scorers first, then the spec's judges (a second batch stage) for what they leave open."""
    with _lock(run, wait_lock, events):
        Run(run).require("answers")
        counts, pending = grade(str(run), wait, events, live_backoff, max_wait)
    return Scored(counts, pending)


def rescore(
    run: str | Path,
    spec_file: str,
    wait: bool = False,
    events: Listener = ignore,
    allowed: Sequence[str] = (),
    wait_lock: bool = False,
) -> Scored:
    """Grade a run again with a changed scoring section; only judge requests not made before are sent."""
    with _lock(run, wait_lock, events):
        set_scoring(Run(run), load_spec(spec_file, allowed).data)
        return score(run, wait, events)


def report(runs: list[str | Path], out: str | Path | None = None) -> Path:
    """Build the report of one run (into its report/) or of several compared; returns index.html. It only reads the
    runs, so it takes no lock: a report of a run in progress shows what is there so far."""
    from nspec.runners.report import build_report

    opened = [Run(r) for r in runs]
    for each in opened:
        each.require("scores")
        check_results(each)
    folder = Path(out) if out else Path(runs[0]) / "report"
    with writing(folder):
        return build_report(opened, folder)


def budget(run: Run, max_usd: float | None) -> float | None:
    """The run's budget (``max_usd`` over the spec's), once the plan's estimate for its answers is checked against
    it: an estimate over the budget, or a model whose price is unknown, is refused before any work (exit 2)."""
    cap = max_usd if max_usd is not None else (run.spec.get("budget") or {}).get("max_usd")
    if cap is None:
        return None
    estimates = {m["label"]: m["cost_usd"].get("run") for m in run.manifest["models"]}
    unknown = [label for label, usd in estimates.items() if usd is None]
    if unknown:
        raise UserError(
            f"the budget is ${cap:,.2f}, but what {', '.join(unknown)} costs is unknown: give its price (`price:` in "
            "the spec) or run without a budget"
        )
    total = sum(usd for usd in estimates.values() if usd is not None)
    if total > cap:
        parts = ", ".join(f"{label} ${usd:,.4f}" for label, usd in estimates.items())
        raise UserError(
            f"the plan estimates ${total:,.4f} for this run's answers ({parts}; every answer at its max_tokens), over "
            f"the budget of ${cap:,.2f}: shrink the grid, pick a cheaper lane (`nspec plan` prices each), or raise "
            "budget.max_usd (--max-usd)"
        )
    return float(cap)


def run(
    spec_file: str,
    out: str | Path = "outputs",
    wait: bool = False,
    events: Listener = ignore,
    allowed: Sequence[str] = (),
    max_cells: int = DEFAULT_MAX_CELLS,
    wait_lock: bool = False,
    max_usd: float | None = None,
    max_wait: float | None = None,
    retry_errors: bool = False,
    emulator: bool = False,
) -> Ran:
    """Compile, submit, collect, score and report; calling it again continues where it stopped. Without ``wait``
    it returns as soon as something is pending (``Ran.pending``); with it, waiting gives up after ``max_wait``
    seconds or when the same failure keeps coming back. ``retry_errors`` first sends again the requests whose final
    result is an error that trying again may fix. With ``emulator``, a rehearsal (`runners.rehearsal`): the run
    goes to the emulator, in a run directory of its own."""
    out = Path(out) / rehearsal.FOLDER if emulator else out
    compiled = compile_spec(spec_file, out, allowed, max_cells)
    path = compiled.path
    if not emulator:
        events(Event("destinations", detail="; ".join(str(d) for d in compiled.destinations)))
        events(Event("compiled", detail=str(path)))
        return _run(path, wait, events, wait_lock, max_usd, max_wait, retry_errors, compiled.source)
    spec = Run(path).spec
    served = [
        model_name(e) for e in model_entries(spec) if str(e["id"]).split("/", 1)[0] in ("local", "openai-compatible")
    ]
    with rehearsal.emulator(path, served) as root:
        said = f"every model → the emulator at {root} (a rehearsal: no key, nothing paid)"
        events(Event("destinations", detail=said))
        events(Event("compiled", detail=str(path)))
        return _run(path, wait, events, wait_lock, max_usd, max_wait, retry_errors, compiled.source)


def _run(
    path: Path,
    wait: bool,
    events: Listener,
    wait_lock: bool,
    max_usd: float | None,
    max_wait: float | None,
    retry_errors: bool,
    source: SourceMap | None,
) -> Ran:
    """`run`'s stages after the compile."""
    started = time.monotonic()

    def left() -> float | None:
        return None if max_wait is None else max(0.0, max_wait - (time.monotonic() - started))

    large = sum(m["requests"] for m in Run(path).manifest["models"]) >= LARGE_RUN
    if large:
        _give_back_memory()
    with _lock(path, wait_lock, events):
        if retry_errors:
            for stage in stages(Run(path)):
                session = Session.open(str(path), stage=stage, events=events)
                try:
                    session.retry_errors()
                finally:
                    session.close()
        sent = submit(path, events, announce=False, max_usd=max_usd, source=source)
        got = collect(path, wait, events, max_wait=left())
        if got.pending:
            return Ran(path, sent, got)
        scored = score(path, wait, events, max_wait=left())
        if scored.pending:
            return Ran(path, sent, got, scored)
        if large:
            _give_back_memory()
        return Ran(path, sent, got, scored, report([path]))


# Requests from which a run gives back memory between its stages: below it, the peak is small anyway, and dropping
# the tokenizer would only cost the next compile its loading again.
LARGE_RUN = 1000


def _give_back_memory() -> None:
    """Between the stages of one process, give back what the stage before held and the next may not need: the
    tokenizers (about 75 MB for o200k_base; loaded again if anything asks, as live pacing does), and the pages the
    C allocator keeps free after compiling and sending (glibc's malloc_trim; elsewhere nothing). What the report
    needs most (a JavaScript engine drawing the charts, pyarrow writing cells.parquet) cannot reuse those pages."""
    encoding.cache_clear()
    gc.collect()
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):  # not glibc
        return
    malloc_trim(0)


def status(run: str | Path) -> dict[str, Any]:
    """What is pending, done and failed per stage and model, batches with their provider status, and the verdicts
    so far."""
    opened = Run(run)
    ledger = opened.ledger()
    try:
        reports = [stage_status(opened, ledger, stage) for stage in stages(opened)]
    finally:
        ledger.close()
    return {"run": str(run), "stages": reports, "scores": verdict_counts(opened)}
