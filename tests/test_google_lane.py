"""The Gemini lane (`google/<model>`) through the real google-genai SDK against `nspec emulator`: batch (resumable
upload, batch job, responses file) and live, wrong keys and unknown models refused as Google refuses them, an
interrupted create found again, and spec parameters checked against Gemini's generationConfig."""

from __future__ import annotations

import json
import signal

import pytest
from google import genai
from google.genai import errors, types

from nspec.compiler.run_writer import compile_run
from nspec.runners.emulator.config import RateLimits
from nspec.runners.providers import google
from nspec.spec import load_spec
from tests.conftest import BASE
from tests.gateway import Gateway
from tests.test_emulator import needle_prompt
from tests.test_runners import SPEC, assert_complete, nspec_process, results, submit

pytestmark = pytest.mark.usefixtures("api_keys")


@pytest.fixture
def gemini_key(monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)


def spec_for(tmp_path, emu, mode, model="gemini-2.5-flash", params="{temperature: 0, max_tokens: 40}", trials=1):
    entry = f'  - {{id: google/{model}, mode: {mode}, base_url: "{emu.google_base_url}", params: {params}}}'
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(models=entry, trials=trials, attempts=2, live_below=0))
    return spec


@pytest.mark.parametrize("mode", ["batch", "live"])
def test_a_spec_runs_end_to_end_on_gemini(emulator, tmp_path, cli, gemini_key, mode):
    emu = emulator()
    spec = spec_for(tmp_path, emu, mode)
    result = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    got = assert_complete(run)
    cells = {c["cell_id"]: c for c in map(json.loads, (run / "cells.jsonl").read_text().splitlines())}
    for r in got:
        assert r["status"] == "ok" and r["source"]["kind"] == mode and r["usage"]["input_tokens"] > 0
        assert cells[r["cell_id"]]["negative"] or cells[r["cell_id"]]["expected"][0] in r["text"]
    shard = next((run / "answers" / "requests").iterdir())
    line = json.loads(shard.read_text().splitlines()[0])  # Gemini's batch file format
    assert set(line) == {"key", "request"} and line["request"]["model"] == "models/gemini-2.5-flash"
    assert line["request"]["generationConfig"] == {"temperature": 0, "maxOutputTokens": 40}
    assert len(emu.emulation.store.google_batches) == (1 if mode == "batch" else 0)


@pytest.mark.parametrize("mode", ["batch", "live"])
def test_a_wrong_key_stops_with_exit_2_and_resumes_once_fixed(emulator, tmp_path, cli, monkeypatch, mode):
    emu = emulator(api_key="right")
    spec = spec_for(tmp_path, emu, mode)
    monkeypatch.setenv("GEMINI_API_KEY", "wrong")
    refused = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert refused.code == 2 and "the key in GEMINI_API_KEY was refused" in refused.err, refused.err
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    assert not results(run) if (run / "answers" / "results.jsonl").exists() else True
    monkeypatch.setenv("GEMINI_API_KEY", "right")
    done = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert done.code == 0, done.err
    assert_complete(run)


@pytest.mark.parametrize("mode", ["batch", "live"])
def test_an_unknown_model_is_refused_as_google_refuses_it(emulator, tmp_path, cli, gemini_key, mode):
    """Where its list of models cannot be read (a gateway that does not forward it), Gemini's own refusal stops the
    run (where it can, the list does first: tests/test_model_lists.py)."""
    emu = emulator()
    spec = spec_for(tmp_path, emu, mode, model="gemini-2.5-flsh")
    with Gateway(emu.google_base_url, "/models", 404) as gateway:
        spec.write_text(spec.read_text().replace(emu.google_base_url, f"{gateway.url}/google"))
        result = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 2, result.err
    assert "google answered 404: models/gemini-2.5-flsh is not found" in result.err and "fix the model id" in result.err


def test_killed_after_create_the_batch_is_found_again(emulator, tmp_path, gemini_key):
    emu = emulator()
    spec = spec_for(tmp_path, emu, "batch")
    killed = nspec_process("run", str(spec), "-o", str(tmp_path / "out"), failpoint="after-create")
    assert killed.returncode == -signal.SIGKILL
    assert len(emu.emulation.store.google_batches) == 1
    again = nspec_process("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert again.returncode == 0, again.stderr
    assert len(emu.emulation.store.google_batches) == 1  # adopted by its display name, not created twice
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    assert_complete(run)


def test_a_429_storm_waits_as_long_as_gemini_says(emulator, tmp_path, gemini_key):
    # Gemini sends no retry header: the delay is a RetryInfo detail in the body, which the lane reads. The runner's
    # own backoff is set far too long to finish in time, so completing proves the body's delay was used.
    emu = emulator(rate_limits=RateLimits(requests_per_minute=1200, burst_seconds=0.1))
    loaded = load_spec(str(spec_for(tmp_path, emu, "live", trials=3)))
    run = compile_run(loaded.data, loaded.base_dir, tmp_path / "out", {}).path
    progress = submit(run, live_backoff=60)
    assert emu.emulation.statuses[429] > 0 and progress.pending == 0 and progress.failed == 0
    assert_complete(run)


@pytest.mark.parametrize(
    "params, message",
    [
        ("{temprature: 0}", "Gemini's generationConfig has no field 'temprature'"),
        ("{thinking_config: {thinkingBudget: 0}, top_k: 4, stop: END}", None),
    ],
)
def test_parameters_are_checked_against_gemini_s_generation_config(cli, spec_file, params, message):
    spec = spec_file(BASE.replace("{id: openai/gpt-4.1-mini}", f"{{id: google/gemini-2.5-flash, params: {params}}}"))
    result = cli("validate", spec)
    if message is None:
        assert result.code == 0, result.err
    else:
        assert result.code == 2 and message in result.err


def test_the_emulator_through_the_sdk(emulator, tmp_path):
    emu = emulator()
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=emu.google_base_url))
    lines = [
        {
            "key": "a",
            "request": {"contents": [{"role": "user", "parts": [{"text": needle_prompt(7)}]}]},
        },
        {"key": "b", "request": {"contents": [], "generationConfig": {"maxOutputTokens": 5}}},  # no contents: refused
        {
            "key": "c",
            "request": {"contents": [{"role": "user", "parts": [{"text": "x"}]}], "generationConfig": {"bogus": 1}},
        },
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    uploaded = client.files.upload(file=str(path), config=types.UploadFileConfig(mime_type="application/jsonl"))
    assert uploaded.name.startswith("files/") and uploaded.size_bytes == path.stat().st_size
    job = client.batches.create(model="gemini-2.5-flash", src=uploaded.name, config={"display_name": "t"})
    assert job.state == types.JobState.JOB_STATE_PENDING and job.display_name == "t"
    emu.clock.advance(3600)
    done = client.batches.get(name=job.name)
    assert done.state == types.JobState.JOB_STATE_SUCCEEDED and done.dest.file_name.startswith("files/")
    out = [json.loads(x) for x in client.files.download(file=done.dest.file_name).decode().splitlines()]
    assert [x["key"] for x in out] == ["a", "b", "c"]  # in input order
    assert "1000007" in out[0]["response"]["candidates"][0]["content"]["parts"][0]["text"]
    assert out[1]["error"]["status"] == out[2]["error"]["status"] == "INVALID_ARGUMENT"
    assert [j.name for j in client.batches.list(config={"page_size": 10})] == [job.name]
    count = client.models.count_tokens(model="gemini-2.5-flash", contents="hello there")
    assert count.total_tokens > 0
    with pytest.raises(errors.ClientError) as info:
        client.models.generate_content(model="gemini-9-nope", contents="hi")
    assert info.value.code == 404 and info.value.status == "NOT_FOUND"


def test_a_rate_limited_call_carries_retry_info_and_no_retry_header(emulator):
    emu = emulator(rate_limits=RateLimits(requests_per_minute=1))
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=emu.google_base_url))
    client.models.generate_content(model="gemini-2.5-flash", contents=needle_prompt(1))
    with pytest.raises(errors.ClientError) as info:
        client.models.generate_content(model="gemini-2.5-flash", contents=needle_prompt(1))
    assert info.value.code == 429 and info.value.status == "RESOURCE_EXHAUSTED"
    assert not any(h.startswith(("retry-after", "x-ratelimit", "anthropic-")) for h in info.value.response.headers)
    delay = google.retry_delay(info.value.details)
    assert delay is not None and 0 < delay <= 60
