"""The Azure OpenAI lane (`azure/<deployment>`) through the real openai SDK's AzureOpenAI client against `nspec
emulator`: batch and live on a deployment, its base model's rules, Azure's api-version, key header and refusals, and
where its key may go."""

from __future__ import annotations

import json
import signal

import openai
import pytest

from tests.conftest import BASE
from tests.test_emulator import needle_prompt
from tests.test_runners import SPEC, assert_complete, nspec_process, results

pytestmark = pytest.mark.usefixtures("api_keys", "azure_key")


@pytest.fixture
def azure_key(monkeypatch):
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT", raising=False)


def spec_for(tmp_path, emu, mode, deployment="gpt-4.1-mini", extra=""):
    entry = f'  - {{id: azure/{deployment}, mode: {mode}, base_url: "{emu.azure_endpoint}"{extra}}}'
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(models=entry, trials=1, attempts=2, live_below=0))
    return spec


@pytest.mark.parametrize("mode", ["batch", "live"])
def test_a_spec_runs_end_to_end_on_an_azure_deployment(emulator, tmp_path, cli, mode):
    emu = emulator(deployments={"nightly-gpt5": "gpt-5-mini"})
    extra = ', base_model: gpt-5-mini, api_version: "2024-10-21"'
    spec = spec_for(tmp_path, emu, mode, "nightly-gpt5", extra)
    result = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    for r in assert_complete(run):
        assert r["status"] == "ok" and r["source"]["kind"] == mode
    line = json.loads(next((run / "answers" / "requests").iterdir()).read_text().splitlines()[0])
    assert line["url"] == "/chat/completions" and line["body"]["model"] == "nightly-gpt5"
    assert "max_completion_tokens" in line["body"]  # gpt-5-mini's rules, though the deployment is named otherwise
    cell = json.loads((run / "cells.jsonl").read_text().splitlines()[0])
    assert cell["tokens_exact"] and cell["context_length"]["counted_by"] == "o200k_base"
    azure_calls = [s for s in emu.emulation.seen if s[1].startswith("/azure/")]
    assert azure_calls and all(q.get("api-version") == "2024-10-21" for _, _, q, _ in azure_calls)
    assert all(h.get("api-key") == "test-key" and "authorization" not in h for _, _, _, h in azure_calls)


def test_the_base_model_s_rules_are_checked_at_validate(cli, spec_file, monkeypatch):
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://res.openai.azure.com")
    entry = "{id: azure/nightly, base_model: gpt-5, params: {temperature: 0.3}}"
    result = cli("validate", spec_file(BASE.replace("{id: openai/gpt-4.1-mini}", entry)))
    assert result.code == 2 and "azure/nightly refuses this" in result.err and "temperature" in result.err


@pytest.mark.parametrize(
    "entry, message",
    [
        ("{id: azure/gpt-4.1-mini}", "an azure model needs `base_url`"),
        ('{id: azure/gpt-4.1-mini, base_url: "https://models.example.com"}', "is not azure's API"),
        ("{id: openai/gpt-4.1-mini, base_model: gpt-5}", "`base_model` applies to azure models only"),
    ],
)
def test_where_an_azure_model_sends_its_key_is_checked(cli, spec_file, entry, message):
    result = cli("validate", spec_file(BASE.replace("{id: openai/gpt-4.1-mini}", entry)))
    assert result.code == 2 and message in result.err, result.err


def test_an_azure_resource_host_takes_the_key(cli, spec_file):
    entry = '{id: azure/gpt-4.1-mini, base_url: "https://my-res.openai.azure.com"}'
    assert cli("validate", spec_file(BASE.replace("{id: openai/gpt-4.1-mini}", entry))).code == 0


@pytest.mark.parametrize("mode", ["batch", "live"])
def test_an_unknown_deployment_is_refused_as_azure_refuses_it(emulator, tmp_path, cli, mode):
    emu = emulator()
    result = cli("run", str(spec_for(tmp_path, emu, mode, "no-such-deployment")), "--wait", "-o", str(tmp_path / "o"))
    if mode == "live":
        assert (result.code == 2 and "DeploymentNotFound" in result.err) or "does not exist" in result.err, result.err
    else:  # a batch takes the file, then answers each line with the deployment's 404
        (run,) = (tmp_path / "o" / "runner-test").iterdir()
        assert {r["status"] for r in results(run)} == {"error"}
        assert {r["error"]["code"] for r in results(run)} == {"DeploymentNotFound"}


def test_a_wrong_key_stops_with_exit_2_and_resumes_once_fixed(emulator, tmp_path, cli, monkeypatch):
    emu = emulator(api_key="right")
    spec = spec_for(tmp_path, emu, "batch")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "wrong")
    refused = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert refused.code == 2 and "the key in AZURE_OPENAI_API_KEY was refused" in refused.err, refused.err
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "right")
    assert cli("run", str(spec), "--wait", "-o", str(tmp_path / "out")).code == 0


def test_killed_after_create_the_batch_is_found_again(emulator, tmp_path):
    emu = emulator()
    spec = spec_for(tmp_path, emu, "batch")
    killed = nspec_process("run", str(spec), "-o", str(tmp_path / "out"), failpoint="after-create")
    assert killed.returncode == -signal.SIGKILL
    again = nspec_process("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert again.returncode == 0, again.stderr
    assert len([b for b in emu.emulation.store.openai_batches.values() if b["flavour"] == "azure"]) == 1
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    assert_complete(run)


def test_the_emulator_speaks_azure_through_the_sdk(emulator, tmp_path):
    emu = emulator(api_key="k")
    client = openai.AzureOpenAI(
        api_key="k", azure_endpoint=emu.azure_endpoint, api_version="2025-04-01-preview", max_retries=0
    )
    reply = client.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": needle_prompt(4)}], max_tokens=20
    )
    assert "1000004" in reply.choices[0].message.content
    lines = [
        {
            "custom_id": "a",
            "method": "POST",
            "url": "/chat/completions",
            "body": {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": needle_prompt(5)}]},
        }
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    uploaded = client.files.create(file=("in.jsonl", data), purpose="batch")
    assert client.files.retrieve(uploaded.id).status == "processed"
    with pytest.raises(openai.BadRequestError):  # OpenAI's endpoint name is not Azure's
        client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/chat/completions", completion_window="24h")
    emu.clock.advance(3600)
    done = client.batches.retrieve(batch.id)
    assert done.status == "completed" and done.request_counts.completed == 1
    out = json.loads(client.files.content(done.output_file_id).text)
    assert "1000005" in out["response"]["body"]["choices"][0]["message"]["content"]
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-nope", messages=[{"role": "user", "content": "hi"}])
    assert info.value.body["code"] == "DeploymentNotFound"
    with pytest.raises(openai.AuthenticationError):
        openai.AzureOpenAI(
            api_key="wrong", azure_endpoint=emu.azure_endpoint, api_version="2025-04-01-preview", max_retries=0
        ).batches.list()
    no_version = openai.OpenAI(api_key="k", base_url=f"{emu.azure_endpoint}/openai", max_retries=0)
    with pytest.raises(openai.APIStatusError) as info:
        no_version.batches.list()
    assert info.value.status_code in (401, 404)  # no api-version: the route is not found (or no api-key)
