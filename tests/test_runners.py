"""Runners against the emulator, through the real SDKs: batch and live, resumption after SIGKILL at every
dangerous point, retries of exactly what is missing, 429 storms, and missing keys."""

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nspec.compiler.providers.io import Credentials, Outcome
from nspec.compiler.providers.registry import provider
from nspec.compiler.run_writer import compile_run
from nspec.errors import UserError
from nspec.prompt import Prompt
from nspec.runners import pipeline
from nspec.runners.emulator.config import Faults, RateLimits, Timing
from nspec.runners.failpoints import ENV as FAILPOINT
from nspec.runners.live import PREFETCH, CallerSettings, LiveRequest, run_live
from nspec.runners.session import Session
from nspec.spec import load_spec
from tests.contract import assert_run_valid
from tests.gateway import Gateway

pytestmark = pytest.mark.usefixtures("api_keys")

SPEC = """\
nspec: 1
name: runner-test
seed: 2
haystack: {{corpus: austen, vary: none}}
needles:
  - text: "The special magic {{city}} number is: {{number}}."
    question: "What is the special magic {{city}} number?"
    answer: "{{number}}"
    vars: {{city: {{choice: cities}}, number: {{digits: 7}}}}
grid: {{context_lengths: [300, 600], depths: [0, 50, 100], trials: {trials}, negative_controls: true}}
prompt: {{user: "{{haystack}}\\n\\n{{question}}", reserve_tokens: 40}}
models:
{models}
run: {{retry: {{attempts: {attempts}, live_below: {live_below}}}, poll: {{min_seconds: 0.01, max_seconds: 0.05}}}}
"""


GPT, CLAUDE = "openai/gpt-4.1-mini", "anthropic/claude-haiku-4-5"


def compile_for(
    tmp_path, emu, modes=("batch", "batch"), trials=1, attempts=3, live_below=0, extra="", ids=(GPT, CLAUDE)
):
    urls = {"openai": emu.openai_base_url, "anthropic": emu.anthropic_base_url}
    models = "\n".join(
        f'  - {{id: {mid}, mode: {mode}, base_url: "{urls[mid.split("/")[0]]}"{extra}}}'
        for mid, mode in zip(ids, modes, strict=False)
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(models=models, trials=trials, attempts=attempts, live_below=live_below))
    loaded = load_spec(str(spec))
    return compile_run(loaded.data, loaded.base_dir, tmp_path / "out", {}).path


def results(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "answers" / "results.jsonl").read_text().splitlines()]


def cell_ids(run: Path) -> list[str]:
    return [json.loads(line)["cell_id"] for line in (run / "cells.jsonl").read_text().splitlines()]


def submit(run, **kwargs):
    session = Session.open(str(run), **kwargs)
    try:
        return session.submit()
    finally:
        session.close()


def collect(run, emu, rounds=10, **kwargs):
    """Collect until nothing is pending, moving the emulator's clock instead of waiting."""
    session = Session.open(str(run), **kwargs)
    try:
        for _ in range(rounds):
            emu.clock.advance(600)
            progress = session.collect()
            if not progress.pending:
                return progress
        return progress
    finally:
        session.close()


def batches_on(emu):
    store = emu.emulation.store
    return len(store.openai_batches), len(store.anthropic_batches)


def nspec_process(*args, failpoint=None):
    env = {**os.environ, FAILPOINT: failpoint or ""}
    return subprocess.run([sys.executable, "-m", "nspec", *args], capture_output=True, text=True, env=env)


def assert_complete(run):
    got = results(run)
    assert sorted(r["cell_id"] for r in got) == sorted(cell_ids(run))  # every cell exactly one final outcome
    return got


def test_batch_happy_path_both_providers(emulator, tmp_path):
    emu = emulator()
    run = compile_for(tmp_path, emu)
    first = submit(run)
    assert len(first.created) == 2 and first.pending == 16
    again = submit(run)
    assert again.created == [] and batches_on(emu) == (1, 1)  # running submit twice creates nothing
    done = collect(run, emu)
    assert done.pending == 0 and done.failed == 0
    got = assert_complete(run)
    cells = {json.loads(line)["cell_id"]: json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()}
    for r in got:
        assert r["status"] == "ok" and r["source"]["kind"] == "batch" and r["usage"]["input_tokens"] > 0
        cell = cells[r["cell_id"]]
        if not cell["negative"]:
            assert cell["expected"][0] in r["text"]  # the oracle found the needle
    assert collect(run, emu).collected == 0  # collecting again writes nothing


def test_live_mode(emulator, tmp_path):
    emu = emulator()
    run = compile_for(tmp_path, emu, modes=("live", "live"))
    progress = submit(run)
    assert progress.pending == 0 and batches_on(emu) == (0, 0)
    got = assert_complete(run)
    assert {r["source"]["kind"] for r in got} == {"live"}


def live_requests(model_id: str, count: int) -> list[LiveRequest]:
    """``count`` short requests to ``model_id``, as compiled."""
    name = model_id.split("/")[0]
    api = provider(name)
    lines = {f"{name}-{i}": Prompt.ask(None, f"Question {i}?") for i in range(count)}
    return [
        LiveRequest(cid, model_id, name, api.request_line({"id": model_id}, cid, prompt, {}, 16), 100)
        for cid, prompt in lines.items()
    ]


def live_settings(emu_or_gateway_url: str, concurrency: int = 1) -> dict[str, CallerSettings]:
    """Both live models at ``emu_or_gateway_url`` (the emulator serves both APIs on one address)."""
    limits = {"concurrency": concurrency}
    return {
        GPT: CallerSettings("openai", Credentials("test-key", f"{emu_or_gateway_url}/v1"), limits, 1),
        CLAUDE: CallerSettings("anthropic", Credentials("test-key", emu_or_gateway_url), limits, 1),
    }


class Meeting:
    """A gateway's hold: each call waits until calls to every one of ``paths`` have come (or, the first time one
    waits ``patience`` seconds, the meeting is given up and no call waits any more)."""

    def __init__(self, paths: set[str], patience: float = 30.0) -> None:
        self.missing, self.patience = set(paths), patience
        self.given_up = False
        self.met = threading.Condition()

    def __call__(self, path: str) -> None:
        with self.met:
            self.missing = {p for p in self.missing if not path.endswith(p)}
            self.met.notify_all()
            if not self.given_up and not self.met.wait_for(lambda: not self.missing, self.patience):
                self.given_up = True


def test_every_model_is_sent_at_once_each_within_its_own_limits(emulator):
    """Two live models, the first with more requests than its slots and its read-ahead hold: each call is held at a
    gateway until both models have sent one. Sent one model after the other, the second model's first call would
    wait for the first model's calls to come back, and they for it."""
    emu = emulator()
    meeting = Meeting({"/v1/chat/completions", "/v1/messages"})
    outcomes: list[Outcome] = []
    slots = 8
    with Gateway(emu.anthropic_base_url, hold=meeting) as gateway:
        requests = {GPT: live_requests(GPT, slots + PREFETCH + 2), CLAUDE: live_requests(CLAUDE, 2)}
        report = asyncio.run(run_live(live_settings(gateway.url, slots), requests, lambda _, o: outcomes.append(o)))
    assert not meeting.given_up  # every call was forwarded once both models had sent one
    assert report.closed == {} and len(outcomes) == slots + PREFETCH + 4 and all(o.status == "ok" for o in outcomes)


def test_a_model_whose_first_request_takes_long_to_read_holds_up_no_other(emulator):
    """A local model's first request comes after a pass over every line of its shards (their keys sorted: seconds
    for thousands of long prompts). Requests are read off the event loop: the other models' calls are sent and come
    back meanwhile, and Ctrl-C is heard. Here the first model's reading waits for the other model's answer; read on
    the loop, it would wait in vain."""
    emu = emulator()
    answered = threading.Event()
    read: list[bool] = []

    def slow_to_read() -> Iterator[LiveRequest]:
        read.append(answered.wait(30))  # the pass over every line, until the other model has had an answer
        yield from live_requests(GPT, 2)

    def on_result(request: LiveRequest, outcome: Outcome) -> None:
        if request.model == CLAUDE:
            answered.set()

    requests = {GPT: slow_to_read(), CLAUDE: live_requests(CLAUDE, 1)}
    report = asyncio.run(run_live(live_settings(emu.anthropic_base_url), requests, on_result))
    assert read == [True] and report.closed == {}
    assert emu.emulation.answered == {"openai": 2, "anthropic": 1}


def test_status_report(emulator, tmp_path):
    emu = emulator()
    run = compile_for(tmp_path, emu)
    submit(run)
    report = pipeline.status(run)["stages"][0]
    gpt = report["models"][0]
    assert (gpt["requests"], gpt["pending"], gpt["done"]) == (8, 8, 0)
    assert gpt["batches"][0]["batch_id"].startswith("batch_") and gpt["batches"][0]["age_seconds"] >= 0
    collect(run, emu)
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        os.environ.pop(key)  # (the fixture restores them) status reads the ledger only: no key needed
    report = pipeline.status(run)["stages"][0]
    assert all(m["done"] == 8 and m["pending"] == 0 and m["input_tokens"] > 0 for m in report["models"])
    assert report["models"][0]["cost_usd"] > 0


@pytest.mark.parametrize("point", ["after-upload", "after-create"])
def test_killed_during_submit_never_duplicates_a_batch(emulator, tmp_path, point):
    emu = emulator()
    run = compile_for(tmp_path, emu)
    killed = nspec_process("submit", str(run), failpoint=point)
    assert killed.returncode == -signal.SIGKILL
    resumed = nspec_process("submit", str(run))
    assert resumed.returncode == 3, resumed.stderr  # submitted, still pending
    assert batches_on(emu) == (1, 1)  # no duplicate batch on either provider
    if point == "after-create":
        assert "found batch" in resumed.stdout  # the batch created before the kill was adopted
    collect(run, emu)
    assert_complete(run)


def test_killed_during_download(emulator, tmp_path):
    emu = emulator()
    run = compile_for(tmp_path, emu, modes=("batch",))  # one provider: the kill comes in its first download
    submit(run)
    emu.clock.advance(600)
    killed = nspec_process("collect", str(run), failpoint="during-download")
    assert killed.returncode == -signal.SIGKILL
    assert len(results(run)) == 1  # killed right after the first result was written
    collect(run, emu)
    assert_complete(run)  # nothing duplicated, nothing lost


def test_killed_in_the_middle_of_a_live_run(emulator, tmp_path):
    emu = emulator()
    run = compile_for(tmp_path, emu, modes=("live",))  # one provider: the kill comes at its first result
    killed = nspec_process("submit", str(run), failpoint="live-result")
    assert killed.returncode == -signal.SIGKILL
    assert len(results(run)) == 1  # the first result was kept
    submit(run)
    assert_complete(run)


def ledger_totals(cli, run):
    state = json.loads(cli("status", str(run), "--json").out)
    models = state["stages"][0]["models"]
    return {k: sum(m[k] for m in models) for k in ("done", "failed", "input_tokens", "output_tokens")}


def test_a_kill_between_writing_a_result_and_recording_it_keeps_its_tokens(emulator, tmp_path, cli):
    emu = emulator()
    run = compile_for(tmp_path, emu, modes=("live",))  # one provider: the kill comes at its first result
    killed = nspec_process("submit", str(run), failpoint="after-append")
    assert killed.returncode == -signal.SIGKILL and len(results(run)) == 1  # written, not recorded
    assert cli("submit", str(run)).code == 0
    got = assert_complete(run)
    totals = ledger_totals(cli, run)
    assert totals["done"] == len(got)
    assert totals["input_tokens"] == sum(r["usage"]["input_tokens"] for r in got) > 0  # the first one's included
    assert totals["output_tokens"] == sum(r["usage"]["output_tokens"] for r in got)


def test_a_kill_between_writing_an_error_and_recording_it_keeps_it_an_error(emulator, tmp_path, cli):
    emu = emulator(faults=Faults(request_error_rate=1.0))
    run = compile_for(tmp_path, emu, modes=("batch",), attempts=1)
    assert cli("submit", str(run)).code == 3
    emu.clock.advance(600)
    killed = nspec_process("collect", str(run), failpoint="after-append")
    assert killed.returncode == -signal.SIGKILL and len(results(run)) == 1
    assert cli("collect", str(run)).code == 4  # every request ended in an error, the one written before the kill too
    totals = ledger_totals(cli, run)
    assert totals["failed"] == len(cell_ids(run)) and totals["done"] == 0


def test_a_token_limit_no_request_fits_is_an_error_before_anything_is_sent(emulator, tmp_path, cli):
    emu = emulator()
    run = compile_for(tmp_path, emu, modes=("live",), extra=", rate_limits: {tokens_per_minute: 100}")
    result = cli("submit", str(run))
    assert result.code == 2, result.err
    assert re.search(
        r"a request needs [\d,]+ tokens \(its input plus max_tokens\), more than the tokens-per-minute "
        r"limit of 100 \(rate_limits.tokens_per_minute\), so it can never be sent",
        result.err,
    )
    assert emu.emulation.answered["openai"] == 0 and not (run / "answers" / "results.jsonl").read_text()


def test_a_provider_limit_no_request_fits_stops_at_the_first_refusal(emulator, tmp_path, cli):
    emu = emulator(rate_limits=RateLimits(tokens_per_minute=200))
    run = compile_for(tmp_path, emu, modes=("live",))
    start = time.monotonic()
    result = cli("submit", str(run))
    assert result.code == 2, result.err
    assert "more than the tokens-per-minute limit of 200 (the provider's rate-limit headers)" in result.err
    assert time.monotonic() - start < 30  # not a hundred rounds of waiting


def test_two_processes_in_one_run_directory_take_turns(emulator, tmp_path, cli):
    emu = emulator(timing=Timing(validate_seconds=3600, seconds_per_request=0.1, finalize_seconds=1))
    run = compile_for(tmp_path, emu)
    assert cli("submit", str(run)).code == 3
    env = {**os.environ, FAILPOINT: ""}
    waiting = subprocess.Popen(
        [sys.executable, "-m", "nspec", "collect", str(run), "--wait"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        lock = run / "lock"
        deadline = time.monotonic() + 120
        while not (lock.is_file() and lock.read_text().startswith(f"{waiting.pid} ")):
            assert waiting.poll() is None and time.monotonic() < deadline, "the first process never took the run"
            time.sleep(0.05)
        for command in ("submit", "collect", "score"):
            second = cli(command, str(run))
            assert second.code == 3, second.err  # run again later: nothing sent twice
            assert re.search(rf"is being worked on by pid {waiting.pid} since 20\d\d-\d\d-\d\dT", second.err)
            assert "--wait-lock" in second.err
        assert cli("status", str(run)).code == 0  # reading is never refused for the lock
        for command in ("report", "variance", "dissent", "answers"):
            read = cli(command, str(run))  # nothing to read yet, and said so: never "being worked on"
            assert read.code == 2 and "has no scores yet: `nspec score" in read.err, (command, read.err)
    finally:
        waiting.kill()
        waiting.wait()
    emu.clock.advance(7200)  # the kernel dropped the killed holder's lock: the next process carries on
    done = cli("collect", str(run))
    assert done.code == 0, done.err
    assert batches_on(emu) == (1, 1)
    assert_complete(run)


def test_two_runs_started_at_once_send_everything_once(emulator, tmp_path):
    """Cron starting `nspec run` while the last one still runs: one process works, the other says so (exit 3) or,
    with --wait-lock, waits and then finds nothing left to send. One batch, one live call per request."""
    emu = emulator(timing=Timing(validate_seconds=2, seconds_per_request=0.05, finalize_seconds=0.5))
    # One provider, a batch model and a live one (three processes importing a second SDK would prove nothing more).
    compile_for(tmp_path, emu, modes=("batch", "live"), ids=(GPT, "openai/gpt-4.1-nano"))
    spec, out = str(tmp_path / "spec.yaml"), str(tmp_path / "out")
    env = {**os.environ, FAILPOINT: ""}
    command = [sys.executable, "-m", "nspec", "run", spec, "--wait", "-o", out]
    both = [
        subprocess.Popen([*command, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for extra in ([], ["--wait-lock"])
    ]
    third = None
    try:
        run = next((tmp_path / "out" / "runner-test").iterdir()) if (tmp_path / "out").exists() else None
        deadline = time.monotonic() + 60
        while run is None or not (run / "lock").is_file() or not (run / "lock").read_text():
            assert time.monotonic() < deadline, "no process took the run"
            time.sleep(0.02)
            found = list((tmp_path / "out" / "runner-test").glob("[0-9a-f]*")) if (tmp_path / "out").exists() else []
            run = found[0] if found else None
        third = nspec_process("run", spec, "-o", out)  # a third, without --wait-lock, while one is working
        finished = [p.communicate(timeout=120) for p in both]
    finally:
        for p in both:
            p.kill()
    plain, waited = both
    assert waited.returncode == 0, finished[1]
    assert plain.returncode == 0 or (plain.returncode == 3 and "is being worked on by pid" in finished[0][1])
    assert third.returncode == 3 and "is being worked on by pid" in third.stderr, third.stderr
    assert batches_on(emu) == (1, 0)  # the one batch, created once
    live_cells = [c for c in cell_ids(run) if c.startswith("openai-gpt-4-1-nano")]
    assert live_cells and emu.emulation.answered["openai"] == len(live_cells)  # every live call made once
    assert_complete(run)


def test_expiry_resubmits_exactly_the_missing_requests(emulator, tmp_path):
    emu = emulator(faults=Faults(batch_expire_rate=1.0, expire_fraction=0.5))
    run = compile_for(tmp_path, emu, modes=("batch",), attempts=3, live_below=0)
    submit(run)
    emu.clock.advance(600)
    session = Session.open(str(run))
    session.collect()
    retry_shards = sorted((run / "answers" / "requests").glob("*retry2*"))
    assert len(retry_shards) == 1
    retried = {json.loads(line)["custom_id"] for line in retry_shards[0].read_text().splitlines()}
    done = {r["cell_id"] for r in results(run)}
    assert len(retried) == 4 and not retried & done and retried | done == set(cell_ids(run))
    session.close()
    final = collect(run, emu)
    got = assert_complete(run)
    # halves again and again: 4 + 2 + 1 answered, the last one out of attempts
    assert final.failed == 1 and sum(r["status"] == "ok" for r in got) == 7
    failed = next(r for r in got if r["status"] != "ok")
    assert failed["error"]["code"] == "batch_expired"


def test_small_remainder_goes_live(emulator, tmp_path):
    emu = emulator(faults=Faults(batch_expire_rate=1.0, expire_fraction=0.5))
    run = compile_for(tmp_path, emu, modes=("batch",), live_below=20)
    submit(run)
    collect(run, emu)
    got = assert_complete(run)
    kinds = [r["source"]["kind"] for r in got]
    assert kinds.count("batch") == 4 and kinds.count("live") == 4 and batches_on(emu) == (1, 0)


def test_request_errors_are_retried(emulator, tmp_path):
    emu = emulator(faults=Faults(request_error_rate=0.3), seed=4)
    run = compile_for(tmp_path, emu, attempts=5)
    submit(run)
    progress = collect(run, emu)
    assert progress.pending == 0
    got = assert_complete(run)
    assert sum(r["status"] == "ok" for r in got) >= 14  # a few may use up all five attempts


def test_a_429_storm_ends_complete(emulator, tmp_path):
    # 20 requests/s with a tenth of a second of burst, and the runner is not told: it learns from 429s and headers.
    emu = emulator(rate_limits=RateLimits(requests_per_minute=1200, burst_seconds=0.1))  # 2 at once, 8 sent
    run = compile_for(tmp_path, emu, modes=("live", "live"), trials=3)
    progress = submit(run, live_backoff=0.01)
    assert emu.emulation.statuses[429] > 0  # there was a storm
    assert progress.pending == 0 and progress.failed == 0
    assert len(assert_complete(run)) == 48


def test_truncated_downloads_are_retried(emulator, tmp_path):
    emu = emulator(faults=Faults(truncate_rate=0.5), seed=1)
    run = compile_for(tmp_path, emu)
    submit(run)
    progress = collect(run, emu, rounds=20)
    assert progress.pending == 0
    assert_complete(run)


def test_missing_key_exits_2_before_any_call(emulator, tmp_path, monkeypatch):
    emu = emulator()
    run = compile_for(tmp_path, emu)
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    result = nspec_process("submit", str(run))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "no API key for anthropic/claude-haiku-4-5: set NSPEC_ANTHROPIC_API_KEY or ANTHROPIC_API_KEY" in result.stderr
    )
    assert batches_on(emu) == (0, 0) and not emu.emulation.store.files  # nothing was uploaded


def test_missing_package_names_the_pip_command(emulator, tmp_path, monkeypatch):
    emu = emulator()
    run = compile_for(tmp_path, emu)
    monkeypatch.setitem(sys.modules, "anthropic", None)  # as if it were not installed
    with pytest.raises(UserError, match="pip install anthropic"):
        Session.open(str(run))


@pytest.mark.parametrize("mode", ["batch", "live"])
def test_a_wrong_key_stops_with_exit_2_and_the_same_command_resumes_once_it_is_fixed(
    emulator, tmp_path, monkeypatch, cli, mode
):
    # Batches wait for the clock to be moved, however slow the machine is.
    emu = emulator(api_key="the-right-key", timing=Timing(validate_seconds=300, seconds_per_request=0.02))
    run = compile_for(tmp_path, emu, modes=(mode, mode))
    monkeypatch.setenv("OPENAI_API_KEY", "a-wrong-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "a-wrong-key")
    refused = cli("run", str(tmp_path / "spec.yaml"), "-o", str(tmp_path / "out"))
    assert refused.code == 2, refused.err
    assert re.search(
        r"answered 401: .* the key in (OPENAI|ANTHROPIC)_API_KEY was refused; set a valid one", refused.err
    )
    assert "Traceback" not in refused.err and "internal error" not in refused.err
    answers = run / "answers" / "results.jsonl"
    assert not answers.exists() or answers.read_text() == ""  # a refusal is never recorded as an answer
    monkeypatch.setenv("OPENAI_API_KEY", "the-right-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "the-right-key")
    fixed = cli("run", str(tmp_path / "spec.yaml"), "-o", str(tmp_path / "out"))
    if mode == "batch":
        assert fixed.code == 3, fixed.err  # submitted: the batches are pending
        emu.clock.advance(600)
        fixed = cli("run", str(tmp_path / "spec.yaml"), "-o", str(tmp_path / "out"))
    assert fixed.code == 0, fixed.err
    assert len(results(run)) == len(cell_ids(run)) and all(r["status"] == "ok" for r in results(run))


def test_not_a_run_directory(tmp_path, cli):
    result = cli("status", str(tmp_path))
    assert result.code == 2 and "is not a run directory (no manifest.json)" in result.err


def test_cli_exit_codes(emulator, tmp_path, cli):
    emu = emulator()
    run = compile_for(tmp_path, emu)
    assert cli("submit", str(run)).code == 3  # submitted, still pending
    assert cli("collect", str(run)).code == 3
    emu.clock.advance(600)
    done = cli("collect", str(run))
    assert done.code == 0 and "16 results collected" in done.out
    status = json.loads(cli("status", str(run), "--json").out)
    assert [m["done"] for m in status["stages"][0]["models"]] == [8, 8]


def test_collect_wait_polls_until_done(emulator, tmp_path, cli):
    emu = emulator(timing=Timing(validate_seconds=0.05, seconds_per_request=0.001, finalize_seconds=0.05))
    run = compile_for(tmp_path, emu)
    cli("submit", str(run))
    waited = cli("collect", str(run), "--wait")
    assert waited.code == 0 and len(results(run)) == 16


def test_run_end_to_end_with_report(emulator, tmp_path, cli):
    emu = emulator(timing=Timing(validate_seconds=0.05, seconds_per_request=0.001, finalize_seconds=0.05))
    run = compile_for(tmp_path, emu, modes=("batch", "live"))
    spec = str(tmp_path / "spec.yaml")
    result = cli("run", spec, "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    assert f"run directory: {run}" in result.out and "report:" in result.out
    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 16 and {s["verdict"] for s in scores} <= {"pass", "fail", "undecided"}
    assert sum(s["verdict"] == "pass" for s in scores) >= 12  # the oracle finds the needles
    report = run / "report"
    assert (report / "index.html").is_file() and (report / "summary.csv").is_file()
    assert sorted(p.name for p in report.glob("*.png")) == [
        "cost.png",
        "heatmap-anthropic-claude-haiku-4-5.png",
        "heatmap-openai-gpt-4-1-mini.png",
        "length.png",
        "negatives-anthropic-claude-haiku-4-5.png",
        "negatives-openai-gpt-4-1-mini.png",
    ]
    assert "<script src=" not in (report / "index.html").read_text()  # Vega inlined: works offline
    assert_run_valid(run)
    again = cli("run", spec, "--wait", "-o", str(tmp_path / "out"))
    assert again.code == 0 and batches_on(emu) == (1, 0)  # continues where it stopped: nothing resent


def test_run_without_wait_exits_3_while_pending(emulator, tmp_path, cli):
    emu = emulator(timing=Timing(validate_seconds=3600, seconds_per_request=60))  # pending however slow the machine
    compile_for(tmp_path, emu)
    result = cli("run", str(tmp_path / "spec.yaml"), "-o", str(tmp_path / "out"))
    assert result.code == 3 and "16 requests pending" in result.err


@pytest.mark.parametrize("settings, kind", [("", "live"), (", batch_api: true, mode: batch", "batch")])
def test_openai_compatible_servers(emulator, tmp_path, settings, kind):
    """An OpenAI-compatible server runs live by default, and batch when the spec says it has /v1/batches."""
    emu = emulator(models=["llama-3-8b"])  # the server's own model
    spec = tmp_path / "spec.yaml"
    model = f'  - {{id: openai-compatible/llama-3-8b, base_url: "{emu.openai_base_url}"{settings}}}'
    spec.write_text(SPEC.format(models=model, trials=1, attempts=3, live_below=0))
    loaded = load_spec(str(spec))
    run = compile_run(loaded.data, loaded.base_dir, tmp_path / "out", {}).path
    submit(run)
    collect(run, emu)
    got = assert_complete(run)
    assert {r["source"]["kind"] for r in got} == {kind}
    assert batches_on(emu) == ((1, 0) if kind == "batch" else (0, 0))


@pytest.mark.parametrize("mode", ["live", "batch"])
def test_an_unknown_model_is_refused_before_anything_is_sent(emulator, tmp_path, cli, mode):
    """The emulator lists the providers' models only, and a run asks the list first: a misspelt one fails the
    rehearsal at its line, with the model it was probably meant to be, before any request (the emulator still
    refuses it as the provider does, live and line by line in a batch: tests/test_emulator.py)."""
    emu = emulator()
    compile_for(tmp_path, emu, modes=(mode, mode))
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec.read_text().replace("openai/gpt-4.1-mini", "openai/gpt-4.1-mnii"))
    result = cli("run", str(spec), "-o", str(tmp_path / "out"))
    assert result.code == 2, result.err
    assert "models[0].id: 'gpt-4.1-mnii' is not among the models openai serves" in result.err
    assert result.err.rstrip().endswith("did you mean openai/gpt-4.1-mini?")
    assert not emu.emulation.store.openai_batches and not emu.emulation.answered


def test_an_anthropic_create_streams_its_shard_as_the_json_body_each_time_it_is_sent(tmp_path):
    """The create call's body is read from the shard as it is sent (never parsed or held whole), and again for a
    retry; it is exactly `{"requests": [...]}` of the shard's lines, and its Content-Length is its size."""
    from nspec.runners.providers.anthropic import ShardBody

    requests = [
        {"custom_id": f"c{i}", "params": {"model": "m", "max_tokens": 5, "note": "é" * (i * 1000)}} for i in range(60)
    ]
    shard = tmp_path / "shard.jsonl"
    shard.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" + ("\n" if i == 3 else "") for i, r in enumerate(requests)),
        "utf-8",
    )
    body = ShardBody(shard)
    sent, again = b"".join(body), b"".join(body)
    assert sent == again and len(sent) == body.length
    assert json.loads(sent) == {"requests": requests}
    assert max(len(chunk) for chunk in body) < (1 << 20) + 120_000  # sent in pieces of about 1 MB, not whole
