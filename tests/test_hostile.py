"""Provider data as untrusted input: runs against `tests.hostile`, a fake OpenAI and Anthropic over real HTTP (the
SDKs unpatched) that answers with the faults real services, gateways and proxies produce. Each run completes, or
exits 2, 3 or 4 naming the cause: no result lost, no duplicate paid batch, the other models' results collected, and
never exit 1."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nspec.runners.providers import SDK_RETRIES_ENV, pacing, retry_after
from nspec.runners.session import MAX_IDENTICAL_FAILURES, Session
from tests.hostile import RESET, Call, Hostile, Reply

KEY = "hostile-test-key-0123456789abcdefXYZ"  # long, like a real key: a short one is not redacted

SPEC = """\
nspec: 1
name: hostile
seed: 3
haystack: {{corpus: austen, vary: none}}
needles:
  - text: "The number is {{n}}."
    question: "What is the number?"
    answer: "{{n}}"
    vars: {{n: {{digits: 7}}}}
grid: {{context_lengths: [300], depths: [0, 100]}}
prompt: {{user: "{{haystack}}\\n\\n{{question}}", reserve_tokens: 20}}
models:
{models}
scoring: [{{contains: "{{{{answer}}}}"}}]
run: {{retry: {{attempts: 2, live_below: 0}}, poll: {{min_seconds: 0.01, max_seconds: 0.02}}}}
report: {{charts: [negatives]}}  # no chart has data: the report is not what these tests look at
"""


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Hostile]:
    # A cache of the test's own: the batches run folders claim are keyed by service address and batch id, and a
    # later test's server may get an earlier one's port and hand out the same ids.
    monkeypatch.setenv("NSPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv(SDK_RETRIES_ENV, "0")
    hostile = Hostile().start()
    yield hostile
    hostile.stop()


def write_spec(tmp_path: Path, server: Hostile, modes: tuple[str, str] = ("batch", "batch")) -> str:
    urls = (f"{server.url}/v1", server.url)
    ids = ("openai/gpt-4.1-mini", "anthropic/claude-haiku-4-5")
    models = "\n".join(
        f'  - {{id: {mid}, mode: {mode}, base_url: "{url}"}}'
        for mid, url, mode in zip(ids, urls, modes, strict=True)
        if mode != "-"
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(models=models))
    return str(spec)


def run_dir(tmp_path: Path, out: str = "out") -> Path:
    return next((tmp_path / out / "hostile").iterdir())


def results(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "answers" / "results.jsonl").read_text().splitlines()]


def assert_one_result_per_cell(run: Path) -> list[dict]:
    got = results(run)
    cells = [json.loads(line)["cell_id"] for line in (run / "cells.jsonl").read_text().splitlines()]
    assert sorted(r["cell_id"] for r in got) == sorted(cells)
    return got


def batches_on_record(run: Path) -> list[dict]:
    db = sqlite3.connect(run / "ledger.sqlite")
    db.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in db.execute("SELECT * FROM batches ORDER BY created_at")]
    finally:
        db.close()


def first_of(model_prefix: str):
    """True for the first batch (of its provider) whose output is being written."""
    seen: set[str] = set()

    def first(batch_id: str) -> bool:
        if not batch_id.startswith(model_prefix):
            return False
        seen.add(batch_id)
        return len(seen) == 1

    return first


def test_lines_that_are_no_results_are_kept_named_and_their_requests_sent_again(server, tmp_path, cli):
    openai_first, anthropic_first = first_of("batch_"), first_of("msgbatch_")

    def output(batch_id: str, lines: list[bytes]) -> list[bytes]:
        if openai_first(batch_id):  # not JSON, and a completion without choices
            broken = json.loads(lines[1])
            broken["response"]["body"]["choices"] = []
            return [b"<html>502 Bad Gateway</html>", json.dumps(broken).encode()]
        if anthropic_first(batch_id):  # a JSON array, and a result whose custom_id is null
            nameless = json.loads(lines[1])
            nameless["custom_id"] = None
            return [b'["a", "b"]', json.dumps(nameless).encode()]
        return lines

    server.output = output
    ran = cli("run", write_spec(tmp_path, server), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 0, ran.err
    run = run_dir(tmp_path)
    assert all(r["status"] == "ok" for r in assert_one_result_per_cell(run))
    kept = sorted(p.name for p in (run / "answers" / "downloads").glob("*.jsonl"))
    assert len(kept) == 2  # each broken download kept for whoever wants to look
    assert (
        b"502 Bad Gateway"
        in (run / "answers" / "downloads" / kept[0]).read_bytes()
        + (run / "answers" / "downloads" / kept[1]).read_bytes()
    )
    notes = [b["note"] for b in batches_on_record(run) if b["note"]]
    assert len(notes) == 2 and all("2 lines of its results are no results, the first: line 1 of" in n for n in notes)
    assert "not JSON" in " ".join(notes) and "a JSON list, not an object" in " ".join(notes)
    assert len(server.batches) == 2 and len(server.message_batches) == 2  # the missing two sent once more each


@pytest.mark.parametrize("output", ["other ids", "empty"])
def test_a_batch_of_ours_is_never_released_and_its_missing_results_end_in_exit_4_naming_it(
    server, tmp_path, cli, output
):
    def lines(batch_id: str, written: list[bytes]) -> list[bytes]:
        if not batch_id.startswith("batch_"):
            return written
        if output == "empty":
            return []
        return [line.replace(b'"custom_id": "', b'"custom_id": "x') for line in written]

    server.output = lines
    ran = cli("run", write_spec(tmp_path, server), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 4, ran.err
    assert "2 requests ended without an answer" in ran.err
    assert "2 missing: batch batch_" in ran.err and "has no result for it" in ran.err
    assert len(server.batches) == 2  # one per attempt (run.retry.attempts: 2), never more
    run = run_dir(tmp_path)
    on_record = [b for b in batches_on_record(run) if b["model"] == "openai/gpt-4.1-mini"]
    assert [b["batch_id"] for b in on_record] == list(server.batches)  # every batch created stays on record
    assert all(b["state"] == "ended" for b in on_record)
    status = cli("status", str(run))
    assert all(batch_id in status.out for batch_id in server.batches)
    anthropic = [r for r in results(run) if r["model"].startswith("anthropic")]
    assert len(anthropic) == 2 and all(r["status"] == "ok" for r in anthropic)  # the other model is collected
    server.output = lambda batch_id, written: written  # the service mends: asked again on request, as a third batch
    again = cli("run", str(tmp_path / "spec.yaml"), "--wait", "--retry-errors", "-o", str(tmp_path / "out"))
    assert again.code == 0, again.err
    assert len(server.batches) == 3 and all(r["status"] == "ok" for r in assert_one_result_per_cell(run))


def test_a_create_whose_answer_is_lost_is_paid_once(server, tmp_path, cli, monkeypatch):
    monkeypatch.delenv(SDK_RETRIES_ENV)  # the SDKs' own retries as a user has them (twice)

    def respond(call: Call, default):
        if call.route in ("POST /v1/batches", "POST /v1/messages/batches") and call.number == 1:
            default()  # the batch is made; its answer never arrives
            return Reply.json({"error": {"message": "upstream timed out"}}, 504, **{"retry-after-ms": "1"})
        return default()

    server.respond = respond
    ran = cli("run", write_spec(tmp_path, server), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 0, ran.err
    assert server.count("POST /v1/batches") == 1 and server.count("POST /v1/messages/batches") == 1
    assert len(server.batches) == 1 and len(server.message_batches) == 1  # no create sent twice
    assert all(r["status"] == "ok" for r in assert_one_result_per_cell(run_dir(tmp_path)))


def test_a_second_batch_of_a_shard_is_cancelled_and_its_cost_counted(server, tmp_path, cli):
    """A create whose answer was lost, and a listing that does not show its batch yet: a second batch is made. Once
    found, the first is cancelled, and what it cost is counted."""

    def respond(call: Call, default):
        if call.route == "POST /v1/batches" and call.number == 1:
            default()
            return Reply.json({"error": {"message": "gateway timeout"}}, 504)
        if call.route == "GET /v1/batches" and call.number == 1:
            server.hidden = set(server.batches)  # listed late
            try:
                return default()
            finally:
                server.hidden = set()
        return default()

    server.respond = respond
    ran = cli("run", write_spec(tmp_path, server, ("batch", "-")), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 0, ran.err
    run = run_dir(tmp_path)
    first, second = list(server.batches)
    assert server.count("POST /v1/batches/{}/cancel") == 1
    assert [c.path for c in server.calls if c.route == "POST /v1/batches/{}/cancel"] == [f"/v1/batches/{first}/cancel"]
    on_record = {b["batch_id"]: b for b in batches_on_record(run)}
    assert on_record[first]["origin"] == "surplus" and on_record[first]["state"] == "cancelled"
    assert on_record[first]["cost_usd"] > 0 and on_record[second]["origin"] == "created"
    status = json.loads(cli("status", str(run), "--json").out)["stages"][0]["models"][0]
    answered = sum(r["usage"]["input_tokens"] for r in results(run))
    assert answered and status["cost_usd"] > on_record[first]["cost_usd"]  # the answers' cost and the surplus'
    assert {b["batch_id"] for b in status["batches"]} == {first, second}


def test_a_list_of_models_nested_100000_deep_is_a_list_not_read_and_the_run_goes_on(server, tmp_path, cli):
    """The lists of models asked before the first paid request are read by the SDKs, whose JSON decoding recursed
    through such a body into an internal error: now a malformed answer, so the list is not used."""
    deep = b"[" * 100_000 + b"]" * 100_000
    server.respond = lambda call, default: Reply(200, deep) if call.route == "GET /v1/models" else default()
    ran = cli("run", write_spec(tmp_path, server), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 0, ran.err
    assert server.count("GET /v1/models") == 2  # OpenAI's and Anthropic's
    assert_one_result_per_cell(run_dir(tmp_path))


def test_a_damaged_claims_database_is_exit_2_naming_it_and_the_fix(server, tmp_path, cli):
    """The cache's record of which run folder holds which batch, damaged: SQLite's DatabaseError, once an internal
    error after the batch was recorded, is exit 2 naming the file; moved away, the same command goes on."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "batches.sqlite").write_bytes(b"not a database, " * 256)
    spec = write_spec(tmp_path, server)
    ran = cli("run", spec, "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 2, ran.err
    assert f"{cache / 'batches.sqlite'}: nspec's record of which run folder holds which batch cannot be used" in ran.err
    assert "move it away or delete it, and run the same command again" in ran.err
    (cache / "batches.sqlite").unlink()
    ran = cli("run", spec, "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 0, ran.err
    assert_one_result_per_cell(run_dir(tmp_path))
    # the batch created before the refusal was not created again
    assert server.count("POST /v1/batches") == server.count("POST /v1/messages/batches") == 1


def test_content_that_is_not_text_is_an_error_and_a_list_of_text_parts_is_joined(server, tmp_path, cli):
    cells: list[str] = []

    def answer(custom_id: str, body: dict) -> object:
        if custom_id not in cells:
            cells.append(custom_id)
        if cells.index(custom_id) == 0:
            return 1234567  # a number
        return [{"type": "text", "text": "The number "}, {"type": "text", "text": "is 42."}]

    server.answer = answer
    ran = cli("run", write_spec(tmp_path, server, ("batch", "-")), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 4, ran.err
    assert "1 not_text: the answer's content is a int, not text" in ran.err
    got = {r["cell_id"]: r for r in assert_one_result_per_cell(run_dir(tmp_path))}
    assert got[cells[0]]["status"] == "error" and got[cells[1]]["text"] == "The number is 42."
    assert (run_dir(tmp_path) / "scores.jsonl").is_file()  # scoring went through


def _html(call: Call, default) -> Reply:
    default()
    return Reply(200, b"<html><body>Service Unavailable</body></html>", {"content-type": "text/html"})


FAULTS = {
    "a 500 on every create": (
        "POST /v1/batches",
        lambda call, default: Reply.json({"error": {"message": "internal"}}, 500),
        "InternalServerError" if False else "ServerError: openai answered 500: internal",
    ),
    "a reset on every poll": ("GET /v1/batches/{}", lambda call, default: RESET, "ConnectionFailed"),
    "a 429 on every poll": (
        "GET /v1/batches/{}",
        lambda call, default: Reply.json({"error": {"message": "slow down"}}, 429),
        "RateLimited: openai answered 429: slow down",
    ),
    "a 500 whose message names a new request id each time": (
        "GET /v1/batches/{}",
        lambda call, default: Reply.json({"error": {"message": f"internal error (request id req_{call.number})"}}, 500),
        "ServerError: openai answered 500: internal error (request id req_",
    ),
    "a gateway's page with status 200 on every poll": (
        "GET /v1/batches/{}",
        _html,
        "MalformedResponse: openai batches: the answer is not what the API documents",
    ),
    # Valid JSON the SDK's own decoder recurses into until the stack runs out (the live path reads with orjson).
    "a body nested 100,000 deep on every create": (
        "POST /v1/batches",
        lambda call, default: Reply(200, b"[" * 100_000 + b"]" * 100_000),
        "MalformedResponse: openai batches: the answer is not what the API documents (RecursionError",
    ),
    "a body nested 100,000 deep on every poll": (
        "GET /v1/batches/{}",
        lambda call, default: Reply(200, b"[" * 100_000 + b"]" * 100_000),
        "MalformedResponse: openai batches: the answer is not what the API documents (RecursionError",
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_failure_that_keeps_coming_back_is_in_sight_and_waiting_gives_up(server, tmp_path, cli, fault):
    route, reply, named = FAULTS[fault]
    server.respond = lambda call, default: reply(call, default) if call.route == route else default()
    started = time.monotonic()
    ran = cli("run", write_spec(tmp_path, server), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 3, ran.err
    assert time.monotonic() - started < 30
    assert f"gave up waiting: the same failure came back {MAX_IDENTICAL_FAILURES} rounds in a row" in ran.err
    assert named in ran.err  # each round says what failed
    assert "openai/gpt-4.1-mini" in ran.err and "2 requests pending" in ran.err
    run = run_dir(tmp_path)
    anthropic = [r for r in results(run) if r["model"].startswith("anthropic")]
    assert len(anthropic) == 2 and all(r["status"] == "ok" for r in anthropic)  # the healthy model is collected
    status = cli("status", str(run))
    assert "last error (" in status.out and named in status.out
    model = json.loads(cli("status", str(run), "--json").out)["stages"][0]["models"][0]
    held = model["unsent"] + [b for b in model["batches"] if b["error"]]
    assert held and held[0]["error_repeats"] >= MAX_IDENTICAL_FAILURES and named in held[0]["error"]
    assert len(server.batches) <= 1  # a failing create is never a second batch


@pytest.mark.parametrize("route", ["GET /v1/batches/{}", "GET /v1/messages/batches/{}/results"])
def test_a_body_that_trickles_in_is_cut_and_waiting_gives_up(server, tmp_path, cli, monkeypatch, route):
    monkeypatch.setattr(pacing, "GRACE_SECONDS", 0.2)

    def respond(call: Call, default):
        if call.route == route:
            return Reply(200, b" " * 1_000_000, {"content-type": "application/json"}, trickle=0.05)
        return default()

    server.respond = respond
    started = time.monotonic()
    ran = cli("run", write_spec(tmp_path, server), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 3, ran.err
    # The SDK says a control call's cut as its own timeout; a download's cut comes through in nspec's words.
    assert ("cut as too slow" if "results" in route else "Request timed out") in ran.err
    assert "gave up waiting" in ran.err
    assert time.monotonic() - started < 60


def test_max_wait_bounds_the_wait(server, tmp_path, cli):
    def respond(call: Call, default):
        reply = default()
        if call.route == "GET /v1/batches/{}":
            return Reply.json({**json.loads(reply.body), "status": "in_progress"})
        return reply

    server.respond = respond
    started = time.monotonic()
    ran = cli("run", write_spec(tmp_path, server), "--wait", "--max-wait", "0.3", "-o", str(tmp_path / "out"))
    assert ran.code == 3 and "gave up waiting: --max-wait passed; 2 requests pending" in ran.err
    assert time.monotonic() - started < 10


def test_retry_after_is_read_as_seconds_or_an_http_date_and_ignored_when_it_is_not_a_finite_wait():
    assert retry_after({"retry-after": "2.5"}) == 2.5
    assert retry_after({"retry-after-ms": "150"}) == 0.15
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 120))
    assert 115 <= (retry_after({"retry-after": later}) or 0) <= 121
    past = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert retry_after({"retry-after": past}) == 0.0
    for bad in ("inf", "-inf", "nan", "-5", "soon", "1e400"):
        assert retry_after({"retry-after": bad}) is None, bad
    assert retry_after({"retry-after-ms": "nan", "retry-after": "3"}) == 3.0


def test_a_provider_that_asks_to_wait_for_hours_closes_the_model_for_this_run(server, tmp_path, cli):
    def respond(call: Call, default):
        if call.route == "POST /v1/chat/completions":
            return Reply.json({"error": {"message": "quota"}}, 429, **{"retry-after": "100000"})
        return default()

    server.respond = respond
    started = time.monotonic()
    ran = cli("run", write_spec(tmp_path, server, ("live", "batch")), "-o", str(tmp_path / "out"))
    assert ran.code == 3, ran.err
    assert time.monotonic() - started < 20  # never slept on it
    assert "openai/gpt-4.1-mini: rate limited, and asked to wait 100,000s, more than a run waits (300s)" in ran.err
    # Each request asked once by submit and once by collect (each round tries again), never slept on or recorded.
    assert server.count("POST /v1/chat/completions") <= 4
    got = results(run_dir(tmp_path))
    assert [r["model"] for r in got] == ["anthropic/claude-haiku-4-5"] * 2  # no 429 recorded as a result
    status = cli("status", str(run_dir(tmp_path)))
    assert "not sent yet (live)" in status.out and "asked to wait 100,000s" in status.out


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "soon"])
def test_a_retry_after_that_is_no_finite_wait_is_ignored_and_a_429_never_final(server, tmp_path, value):
    def respond(call: Call, default):
        if call.route == "POST /v1/chat/completions" and call.number <= 3:
            return Reply.json({"error": {"message": "slow down"}}, 429, **{"retry-after": value})
        return default()

    server.respond = respond
    spec = write_spec(tmp_path, server, ("live", "-"))
    from nspec.runners import pipeline

    run = pipeline.compile_spec(spec, tmp_path / "out").path
    session = Session.open(str(run), live_backoff=0.01)
    try:
        progress = session.submit()
    finally:
        session.close()
    assert progress.pending == 0 and progress.rate_limited == 3
    assert all(r["status"] == "ok" for r in assert_one_result_per_cell(run))


def test_retryable_errors_are_sent_again_on_request_as_new_attempts_not_second_lines(server, tmp_path, cli):
    def respond(call: Call, default):
        if call.route == "POST /v1/chat/completions" and call.number <= 4:  # two attempts of both cells
            return Reply.json({"error": {"message": "overloaded"}}, 503)
        return default()

    server.respond = respond
    spec = write_spec(tmp_path, server, ("live", "-"))
    out = str(tmp_path / "out")
    first = cli("run", spec, "--wait", "-o", out)
    assert first.code == 4 and "2 503: openai answered 503: overloaded" in first.err
    assert "`--retry-errors` sends again" in first.err
    again = cli("run", spec, "--wait", "-o", out)
    assert again.code == 4  # a rerun alone does not send them again
    fixed = cli("run", spec, "--wait", "--retry-errors", "-o", out)
    assert fixed.code == 0, fixed.err
    got = assert_one_result_per_cell(run_dir(tmp_path))  # one line per cell: the errors' lines went
    assert all(r["status"] == "ok" for r in got)
    db = sqlite3.connect(run_dir(tmp_path) / "ledger.sqlite")
    assert db.execute("SELECT DISTINCT state, error FROM requests").fetchall() == [("done", None)]
    db.close()


def test_lost_result_lines_are_fetched_again_and_never_shrink_the_scores(server, tmp_path, cli):
    out = str(tmp_path / "out")
    assert cli("run", write_spec(tmp_path, server), "--wait", "-o", out).code == 0
    run = run_dir(tmp_path)
    path = run / "answers" / "results.jsonl"
    whole = path.read_text()
    path.write_text("".join(whole.splitlines(keepends=True)[:1]))  # a partial restore
    status = cli("status", str(run))
    assert "3 results recorded in the ledger are missing from the results file" not in status.out
    assert "results recorded in the ledger are missing from the results file" in status.out
    scored = cli("score", str(run))
    assert scored.code == 2 and "3 results the ledger records are missing from" in scored.err
    assert f"`nspec collect {run}` fetches them again" in scored.err
    assert cli("report", str(run)).code == 2
    collected = cli("collect", str(run))
    assert collected.code == 0 and "3 results lost from the results file fetched again" in collected.err
    assert sorted(results(run), key=lambda r: r["cell_id"]) == sorted(
        (json.loads(line) for line in whole.splitlines()), key=lambda r: r["cell_id"]
    )
    path.unlink()  # deleted: the provider still has every output file
    assert cli("collect", str(run)).code == 0 and len(assert_one_result_per_cell(run)) == 4
    assert cli("score", str(run)).code == 0


def test_a_lost_live_result_is_refused_until_sent_again_on_request(server, tmp_path, cli):
    out = str(tmp_path / "out")
    assert cli("run", write_spec(tmp_path, server, ("live", "-")), "-o", out).code == 0
    run = run_dir(tmp_path)
    (run / "answers" / "results.jsonl").write_text("")
    refused = cli("collect", str(run))
    assert refused.code == 2 and "2 results recorded in the ledger are missing" in refused.err
    assert "--resend-lost" in refused.err
    sent = server.count("POST /v1/chat/completions")
    assert cli("collect", str(run), "--resend-lost").code == 0
    assert server.count("POST /v1/chat/completions") == sent + 2 and len(assert_one_result_per_cell(run)) == 2


def test_a_key_a_gateway_echoes_is_never_kept_or_printed(server, tmp_path, cli):
    def respond(call: Call, default):
        echoed = f"bad credentials: {call.headers.get('authorization') or call.headers.get('x-api-key')}"
        if call.route == "POST /v1/batches" and call.number == 1:
            return Reply.json({"error": {"message": echoed}}, 500)
        if call.route == "GET /v1/batches/{}" and call.number == 1:  # in a batch's status
            return Reply.json({**json.loads(default().body), "status": f"validating {echoed}"})
        if call.route == "GET /v1/messages/batches/{}/results":
            lines = default().body.splitlines()
            failed = json.loads(lines[0])
            error = {"type": "error", "error": {"type": "invalid_request_error", "message": echoed}}
            failed["result"] = {"type": "errored", "error": error}
            return Reply(200, b"\n".join([json.dumps(failed).encode(), *lines[1:]]) + b"\n")
        return default()

    server.respond = respond
    echo = f"bad credentials: Bearer {KEY}"
    server.answer = lambda custom_id, body: echo if body.get("model") == "gpt-4.1-mini" else "The number is 42."
    server.output = lambda batch_id, lines: (  # and in a line that is no result
        [f"<html>{echo}</html>".encode(), *lines] if batch_id.startswith("batch_") else lines
    )
    ran = cli("run", write_spec(tmp_path, server), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 4, ran.err
    assert "bad credentials: Bearer [redacted]" in ran.err and KEY not in ran.err + ran.out
    assert list((run_dir(tmp_path) / "answers" / "downloads").glob("*.jsonl"))  # kept, with the key cut out
    run = run_dir(tmp_path)
    assert any("bad credentials: Bearer [redacted]" in (r["error"] or {}).get("message", "") for r in results(run))
    for path in run.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_an_unsafe_file_id_never_touches_a_path_or_a_url(server, tmp_path, cli):
    def respond(call: Call, default):
        reply = default()
        if call.route == "GET /v1/batches/{}":
            return Reply.json({**json.loads(reply.body), "output_file_id": "/../../x/out"})
        return reply

    server.respond = respond
    ran = cli("run", write_spec(tmp_path, server, ("batch", "-")), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 3
    assert "file id '/../../x/out' is not of a safe shape" in ran.err
    assert not any("x/out" in c.path for c in server.calls)
    assert not (tmp_path / "x").exists() and not list(tmp_path.rglob("*out.part"))


def test_adoption_never_takes_a_batch_another_run_folder_holds(server, tmp_path, cli):
    spec = write_spec(tmp_path, server, ("-", "batch"))

    def refuse(call: Call, default):  # the create never reached the service
        if call.route == "POST /v1/messages/batches":
            return Reply.json({"error": {"message": "gateway timeout"}}, 504)
        return default()

    server.respond = refuse
    assert cli("submit", str(_compiled(cli, spec, tmp_path / "b"))).code == 3  # its job is left in `creating`
    server.respond = lambda call, default: default()
    assert cli("run", spec, "--wait", "-o", str(tmp_path / "a")).code == 0  # another folder: the same shard
    (theirs,) = server.message_batches
    resumed = cli("run", spec, "--wait", "-o", str(tmp_path / "b"))
    assert resumed.code == 0, resumed.err
    assert len(server.message_batches) == 2 and "found batch" not in resumed.out
    ours = {r["source"]["batch_id"] for r in results(run_dir(tmp_path, "b"))}
    assert theirs not in ours


def test_a_create_answered_with_a_gateway_page_is_found_again_not_made_twice(server, tmp_path, cli):
    def respond(call: Call, default):
        if call.route == "POST /v1/batches" and call.number == 1:
            return _html(call, default)
        return default()

    server.respond = respond
    ran = cli("run", write_spec(tmp_path, server, ("batch", "-")), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 0, ran.err
    assert "MalformedResponse: openai batches" in ran.err and len(server.batches) == 1


def _compiled(cli, spec: str, out: Path) -> Path:
    compiled = cli("compile", spec, "-o", str(out))
    assert compiled.code == 0, compiled.err
    return Path(compiled.out.strip().splitlines()[-1])


def test_a_retry_whose_create_keeps_failing_is_one_job_and_one_batch_once_it_goes_through(server, tmp_path, cli):
    outage = {"on": True}

    def output(batch_id: str, lines: list[bytes]) -> list[bytes]:
        return lines[1:] if batch_id == "msgbatch_0001" else lines  # the first batch is one result short

    def respond(call: Call, default):
        if call.route == "POST /v1/messages/batches" and call.number > 1 and outage["on"]:
            return Reply.json({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, 529)
        return default()

    server.output, server.respond = output, respond
    spec = write_spec(tmp_path, server, ("-", "batch"))
    stuck = cli("run", spec, "--wait", "-o", str(tmp_path / "out"))
    assert stuck.code == 3 and "gave up waiting" in stuck.err and "529" in stuck.err
    run = run_dir(tmp_path)
    db = sqlite3.connect(run / "ledger.sqlite")
    assert db.execute("SELECT COUNT(*) FROM jobs").fetchone() == (2,)  # the shard and one retry shard, never more
    db.close()
    outage["on"] = False
    done = cli("run", spec, "--wait", "-o", str(tmp_path / "out"))
    assert done.code == 0, done.err
    assert len(server.message_batches) == 2 and all(r["status"] == "ok" for r in assert_one_result_per_cell(run))
    assert "not sent yet" not in cli("status", str(run)).out
    assert cli("run", spec, "--wait", "-o", str(tmp_path / "out")).code == 0 and len(server.message_batches) == 2


def test_a_result_file_the_provider_no_longer_has_is_missing_not_a_model_refused(server, tmp_path, cli):
    def respond(call: Call, default):
        if call.route == "GET /v1/files/{}/content" and call.path == "/v1/files/file-0003/content":
            return Reply.json({"error": {"message": "No such File object: file-0003"}}, 404)
        return default()

    server.respond = respond
    ran = cli("run", write_spec(tmp_path, server, ("batch", "-")), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 0, ran.err
    assert "fix the model id" not in ran.err and "not found (404)" in ran.err
    assert len(server.batches) == 2  # its requests sent again, as missing
    run = run_dir(tmp_path)
    (run / "answers" / "results.jsonl").unlink()  # lost, and now the second batch's file is gone too
    server.respond = lambda call, default: (
        Reply.json({"error": {"message": "No such File object"}}, 404)
        if call.route == "GET /v1/files/{}/content"
        else default()
    )
    refused = cli("collect", str(run))
    assert refused.code == 2 and "--resend-lost" in refused.err and "fix the model id" not in refused.err


def test_answers_too_long_and_lines_too_long_are_bad_lines_read_past(server, tmp_path, cli, monkeypatch):
    from nspec.runners import providers

    monkeypatch.setattr(providers, "MAX_ANSWER_CHARS", 10_000)
    monkeypatch.setattr(providers, "MAX_LINE_BYTES", 100_000)
    sizes = iter([50_000, 500_000])  # the first batch's two answers; then short ones
    server.answer = lambda custom_id, body: "x" * next(sizes, 10)
    ran = cli("run", write_spec(tmp_path, server, ("batch", "-")), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 0, ran.err
    run = run_dir(tmp_path)
    (note,) = [b["note"] for b in batches_on_record(run) if b["note"]]
    assert "2 lines of its results are no results" in note and "50,000 characters, more than any model writes" in note
    kept = next((run / "answers" / "downloads").glob("*.jsonl")).read_bytes().splitlines(keepends=True)
    assert len(kept[1]) == 100_001  # the long line cut where reading it stopped
    assert all(r["status"] == "ok" for r in assert_one_result_per_cell(run))


def test_a_damaged_results_line_is_named_not_a_crash(server, tmp_path, cli):
    assert cli("run", write_spec(tmp_path, server, ("batch", "-")), "--wait", "-o", str(tmp_path / "out")).code == 0
    run = run_dir(tmp_path)
    path = run / "answers" / "results.jsonl"
    first, *rest = path.read_text().splitlines(keepends=True)
    damaged = {**json.loads(first), "text": 5}
    path.write_text(json.dumps(damaged) + "\n" + "".join(rest))
    for command in ("score", "report"):
        refused = cli(command, str(run))
        assert refused.code == 2
        assert f"the result of cell {damaged['cell_id']!r} is damaged (text is a int)" in refused.err


def test_resend_lost_fetches_what_the_provider_keeps_for_free_first(server, tmp_path, cli):
    assert cli("run", write_spec(tmp_path, server, ("batch", "-")), "--wait", "-o", str(tmp_path / "out")).code == 0
    run = run_dir(tmp_path)
    (run / "answers" / "results.jsonl").unlink()
    assert cli("collect", str(run), "--resend-lost").code == 0
    assert len(server.batches) == 1 and len(assert_one_result_per_cell(run)) == 2


def test_odd_batch_answers_hold_nothing_up(server, tmp_path, cli):
    """Request counts that are no counts, an Anthropic result of a type it does not write, a poll answering for
    another batch: the run still completes, each oddity said where it matters."""

    def respond(call: Call, default):
        reply = default()
        if call.route == "GET /v1/batches/{}":
            batch = json.loads(reply.body)
            batch["request_counts"] = {"total": -5, "completed": None, "failed": "many"}
            if call.number == 1:
                batch["id"] = "batch_9999"
            return Reply.json(batch)
        return reply

    first = first_of("msgbatch_")

    def output(batch_id: str, lines: list[bytes]) -> list[bytes]:
        if not first(batch_id):
            return lines
        odd = json.loads(lines[0])
        odd["result"] = {"type": "banana"}
        return [json.dumps(odd).encode(), *lines[1:]]

    server.respond, server.output = respond, output
    ran = cli("run", write_spec(tmp_path, server), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 0, ran.err
    assert "asked for batch batch_0002, the answer is batch batch_9999" in ran.err
    notes = " ".join(b["note"] or "" for b in batches_on_record(run_dir(tmp_path)))
    assert "a result of type 'banana'" in notes
    assert all(r["status"] == "ok" for r in assert_one_result_per_cell(run_dir(tmp_path)))
