"""The Mistral lane (`mistral/<model>`) through the real mistralai SDK against `nspec emulator`: batch (multipart
upload, batch job, output and error files) and live, a prefill sent as Mistral's `prefix`, wrong keys and unknown
models refused as Mistral refuses them, an interrupted create found again, and spec parameters checked against
Mistral's chat completion request."""

from __future__ import annotations

import json
import signal

import pytest
from mistralai.client import Mistral
from mistralai.client import errors as mistral_errors

from nspec.compiler.run_writer import compile_run
from nspec.runners.emulator.config import RateLimits
from nspec.spec import load_spec
from tests.conftest import BASE
from tests.gateway import Gateway
from tests.test_emulator import needle_prompt
from tests.test_runners import SPEC, assert_complete, nspec_process, results, submit

pytestmark = pytest.mark.usefixtures("api_keys")


@pytest.fixture
def mistral_key(monkeypatch):
    monkeypatch.setenv("MISTRAL_API_KEY", "test-key")


def spec_for(tmp_path, emu, mode, model="mistral-small-latest", params="{temperature: 0, max_tokens: 40}", trials=1):
    entry = f'  - {{id: mistral/{model}, mode: {mode}, base_url: "{emu.mistral_base_url}", params: {params}}}'
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(models=entry, trials=trials, attempts=2, live_below=0))
    return spec


@pytest.mark.parametrize("mode", ["batch", "live"])
def test_a_spec_runs_end_to_end_on_mistral(emulator, tmp_path, cli, mistral_key, mode):
    emu = emulator()
    spec = spec_for(tmp_path, emu, mode, params="{temperature: 0, max_completion_tokens: 40, seed: 7}")
    result = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    got = assert_complete(run)
    cells = {c["cell_id"]: c for c in map(json.loads, (run / "cells.jsonl").read_text().splitlines())}
    for r in got:
        assert r["status"] == "ok" and r["source"]["kind"] == mode and r["usage"]["input_tokens"] > 0
        assert cells[r["cell_id"]]["negative"] or cells[r["cell_id"]]["expected"][0] in r["text"]
    shard = next((run / "answers" / "requests").iterdir())
    line = json.loads(shard.read_text().splitlines()[0])  # Mistral's batch file format
    assert set(line) == {"custom_id", "body"} and line["body"]["model"] == "mistral-small-latest"
    assert line["body"]["max_tokens"] == 40 and line["body"]["random_seed"] == 7 and "seed" not in line["body"]
    assert len(emu.emulation.store.mistral_batches) == (1 if mode == "batch" else 0)
    assert emu.emulation.answered["mistral"] == (0 if mode == "batch" else len(got))


@pytest.mark.parametrize("mode", ["batch", "live"])
def test_a_wrong_key_stops_with_exit_2_and_resumes_once_fixed(emulator, tmp_path, cli, monkeypatch, mode):
    emu = emulator(api_key="right")
    spec = spec_for(tmp_path, emu, mode)
    monkeypatch.setenv("MISTRAL_API_KEY", "wrong")
    refused = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert refused.code == 2 and "the key in MISTRAL_API_KEY was refused" in refused.err, refused.err
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    assert not results(run) if (run / "answers" / "results.jsonl").exists() else True
    monkeypatch.setenv("MISTRAL_API_KEY", "right")
    done = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert done.code == 0, done.err
    assert_complete(run)


@pytest.mark.parametrize("mode", ["batch", "live"])
def test_an_unknown_model_is_refused_as_mistral_refuses_it(emulator, tmp_path, cli, mistral_key, mode):
    """Where its list of models cannot be read (a gateway that does not forward it), Mistral's own refusal stops the
    run (where it can, the list does first: tests/test_model_lists.py)."""
    emu = emulator()
    spec = spec_for(tmp_path, emu, mode, model="mistral-smal-latest")
    with Gateway(emu.mistral_base_url, "/v1/models", 404) as gateway:
        spec.write_text(spec.read_text().replace(emu.mistral_base_url, f"{gateway.url}/mistral"))
        result = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 2, result.err
    assert "Invalid model: mistral-smal-latest" in result.err and "fix the model id" in result.err
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    assert not results(run) if (run / "answers" / "results.jsonl").exists() else True


def test_killed_after_create_the_job_is_found_again(emulator, tmp_path, mistral_key):
    emu = emulator()
    spec = spec_for(tmp_path, emu, "batch")
    killed = nspec_process("run", str(spec), "-o", str(tmp_path / "out"), failpoint="after-create")
    assert killed.returncode == -signal.SIGKILL
    assert len(emu.emulation.store.mistral_batches) == 1
    again = nspec_process("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert again.returncode == 0, again.stderr
    assert len(emu.emulation.store.mistral_batches) == 1  # adopted by its metadata, not created twice
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    assert_complete(run)


def test_a_429_storm_ends_complete_on_the_runner_s_own_backoff(emulator, tmp_path, mistral_key):
    # Mistral's 429 says nothing of when to retry (no retry header is documented): the runner backs off on its own.
    emu = emulator(rate_limits=RateLimits(requests_per_minute=1200, burst_seconds=0.1))
    loaded = load_spec(str(spec_for(tmp_path, emu, "live", trials=3)))
    run = compile_run(loaded.data, loaded.base_dir, tmp_path / "out", {}).path
    progress = submit(run, live_backoff=0.01)
    assert emu.emulation.statuses[429] > 0 and progress.pending == 0 and progress.failed == 0
    assert_complete(run)


@pytest.mark.parametrize(
    "params, message",
    [
        ("{temprature: 0}", "Mistral's chat completion request has no parameter 'temprature'"),
        ("{max_completion_tokens: 50, seed: 1, top_p: 0.9, safe_prompt: false, reasoning_effort: high}", None),
    ],
)
def test_parameters_are_checked_against_mistral_s_request(cli, spec_file, params, message):
    spec = spec_file(
        BASE.replace("{id: openai/gpt-4.1-mini}", f"{{id: mistral/mistral-small-latest, params: {params}}}")
    )
    result = cli("validate", spec)
    if message is None:
        assert result.code == 0, result.err
    else:
        assert result.code == 2 and message in result.err


def test_the_emulator_through_the_sdk(emulator, tmp_path):
    emu = emulator(api_key="k")
    client = Mistral(api_key="k", server_url=emu.mistral_base_url)
    lines = [
        {"custom_id": "a", "body": {"messages": [{"role": "user", "content": needle_prompt(7)}], "max_tokens": 30}},
        {"custom_id": "b", "body": {"messages": [{"role": "user", "content": "x"}], "temprature": 0}},  # refused
        {
            "custom_id": "c",
            "body": {
                "messages": [
                    {"role": "user", "content": needle_prompt(9)},
                    {"role": "assistant", "content": "The number is", "prefix": True},
                ]
            },
        },
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    uploaded = client.files.upload(file={"file_name": "in.jsonl", "content": data}, purpose="batch")
    assert uploaded.size_bytes == len(data) and uploaded.purpose == "batch"
    job = client.batch.jobs.create(
        input_files=[uploaded.id], model="mistral-small-latest", endpoint="/v1/chat/completions", metadata={"k": "v"}
    )
    assert job.status == "QUEUED" and job.total_requests == 3 and job.metadata == {"k": "v"}
    emu.clock.advance(3600)
    done = client.batch.jobs.get(job_id=job.id)
    assert done.status == "SUCCESS" and (done.succeeded_requests, done.failed_requests) == (2, 1)
    out = {x["custom_id"]: x for x in map(json.loads, client.files.download(file_id=done.output_file).iter_lines())}
    assert "1000007" in out["a"]["response"]["body"]["choices"][0]["message"]["content"]
    continued = out["c"]["response"]["body"]["choices"][0]["message"]["content"]
    assert continued.startswith("The number is") and "1000009" in continued  # Mistral's answer starts with the prefix
    (failed,) = map(json.loads, client.files.download(file_id=done.error_file).iter_lines())
    assert failed["custom_id"] == "b" and failed["response"]["status_code"] == 422
    assert "temprature" in failed["response"]["body"]["message"]
    listed = client.batch.jobs.list(page=0, page_size=10)
    assert listed.total == 1 and [j.id for j in listed.data] == [job.id]
    reply = client.chat.complete(model="mistral-small-latest", messages=[{"role": "user", "content": needle_prompt(3)}])
    assert "1000003" in reply.choices[0].message.content and reply.usage.prompt_tokens > 0
    with pytest.raises(mistral_errors.MistralError) as info:
        client.chat.complete(model="mistral-nope", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 400 and "Invalid model: mistral-nope" in info.value.body
    with pytest.raises(mistral_errors.MistralError) as info:
        Mistral(api_key="wrong", server_url=emu.mistral_base_url).batch.jobs.list()
    assert info.value.status_code == 401 and json.loads(info.value.body)["message"] == "Unauthorized"
