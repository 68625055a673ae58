"""The Together lane (`together/<model>`) through the real together SDK against `nspec emulator`: its upload (a
redirect to storage, then preprocess), `{custom_id, body}` batch files, jobs found again by their input file, output
and error files, live chat completions, and its refusals."""

from __future__ import annotations

import json
import signal

import pytest
import together

from nspec.runners.providers.together import parse_result
from tests.gateway import Gateway
from tests.test_emulator import needle_prompt
from tests.test_runners import SPEC, assert_complete, nspec_process, results

pytestmark = pytest.mark.usefixtures("api_keys", "together_key")
MODEL = "meta-llama/Llama-3.3-70B-Instruct-Turbo"


@pytest.fixture
def together_key(monkeypatch):
    monkeypatch.setenv("TOGETHER_API_KEY", "test-key")


def spec_for(tmp_path, emu, mode, model=MODEL):
    entry = f'  - {{id: together/{model}, mode: {mode}, base_url: "{emu.together_base_url}"}}'
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(models=entry, trials=1, attempts=2, live_below=0))
    return spec


@pytest.mark.parametrize("mode", ["batch", "live"])
def test_a_spec_runs_end_to_end_on_together(emulator, tmp_path, cli, mode):
    emu = emulator()
    result = cli("run", str(spec_for(tmp_path, emu, mode)), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    cells = {c["cell_id"]: c for c in map(json.loads, (run / "cells.jsonl").read_text().splitlines())}
    for r in assert_complete(run):
        assert r["status"] == "ok" and r["source"]["kind"] == mode and r["usage"]["input_tokens"] > 0
        assert cells[r["cell_id"]]["negative"] or cells[r["cell_id"]]["expected"][0] in r["text"]
    line = json.loads(next((run / "answers" / "requests").iterdir()).read_text().splitlines()[0])
    assert set(line) == {"custom_id", "body"} and line["body"]["model"] == MODEL
    assert len(emu.emulation.store.together_batches) == (1 if mode == "batch" else 0)


def test_killed_after_create_the_batch_is_found_again_by_its_file(emulator, tmp_path):
    emu = emulator()
    spec = spec_for(tmp_path, emu, "batch")
    killed = nspec_process("run", str(spec), "-o", str(tmp_path / "out"), failpoint="after-create")
    assert killed.returncode == -signal.SIGKILL
    again = nspec_process("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert again.returncode == 0, again.stderr
    assert len(emu.emulation.store.together_batches) == 1
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    assert_complete(run)


def test_an_unknown_model_is_refused_live_and_fails_its_lines_in_a_batch(emulator, tmp_path, cli):
    """Where its list of models cannot be read (a gateway that does not forward it), Together's own refusals stop the
    run (where it can, the list does first: tests/test_model_lists.py)."""
    emu = emulator()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with Gateway(emu.together_base_url, "/v1/models", 404) as gateway:
        through = f"{gateway.url}/together"
        live_spec = spec_for(tmp_path / "a", emu, "live", "meta-llama/Nope")
        live_spec.write_text(live_spec.read_text().replace(emu.together_base_url, through))
        live = cli("run", str(live_spec), "--wait", "-o", str(tmp_path / "a" / "out"))
        assert live.code == 2 and "Unable to access model meta-llama/Nope" in live.err, live.err
        batch_spec = spec_for(tmp_path / "b", emu, "batch", "meta-llama/Nope")
        batch_spec.write_text(batch_spec.read_text().replace(emu.together_base_url, through))
        batch = cli("run", str(batch_spec), "--wait", "-o", str(tmp_path / "b" / "out"))
    assert batch.code == 4, batch.err  # each line answered with the model's 404: failures, never answers
    (run,) = (tmp_path / "b" / "out" / "runner-test").iterdir()
    assert {(r["status"], r["error"]["code"]) for r in results(run)} == {("error", "model_not_available")}


def test_result_lines_of_an_unknown_shape_are_errors_never_answers():
    assert parse_result({"custom_id": "a", "response": {"body": {"unexpected": True}}}).status == "error"
    answered = parse_result(
        {"custom_id": "b", "response": {"body": {"choices": [{"message": {"content": "42"}, "finish_reason": "stop"}]}}}
    )
    assert answered.status == "ok" and answered.text == "42"
    refused = parse_result({"custom_id": "c", "error": {"message": "bad", "code": "400"}})
    assert refused.status == "error"


def test_the_emulator_through_the_sdk(emulator, tmp_path):
    emu = emulator(api_key="k")
    client = together.Together(
        api_key="k", base_url=emu.together_base_url, max_retries=0, _strict_response_validation=True
    )
    lines = [
        {"custom_id": "a", "body": {"model": MODEL, "messages": [{"role": "user", "content": needle_prompt(6)}]}},
        {"custom_id": "b", "body": {"model": "nope/nope", "messages": [{"role": "user", "content": "x"}]}},
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    uploaded = client.files.upload(file=path, purpose="batch-api", check=False)
    assert uploaded.bytes == path.stat().st_size and uploaded.filename == "in.jsonl"
    created = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions")
    assert created.job.status == "VALIDATING" and created.job.input_file_id == uploaded.id
    emu.clock.advance(3600)
    done = client.batches.retrieve(created.job.id)
    assert done.status == "COMPLETED" and done.progress == 100.0
    out = [json.loads(x) for x in client.files.content(done.output_file_id).text().splitlines()]
    assert "1000006" in out[0]["response"]["body"]["choices"][0]["message"]["content"]
    (failed,) = [json.loads(x) for x in client.files.content(done.error_file_id).text().splitlines()]
    assert failed["custom_id"] == "b" and failed["response"]["status_code"] == 404
    assert [j.id for j in client.batches.list()] == [created.job.id]
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": needle_prompt(8)}])
    assert "1000008" in reply.choices[0].message.content and reply.usage.prompt_tokens > 0
    with pytest.raises(together.NotFoundError):
        client.chat.completions.create(model="nope/nope", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(together.AuthenticationError):
        together.Together(api_key="wrong", base_url=emu.together_base_url, max_retries=0).batches.list()
