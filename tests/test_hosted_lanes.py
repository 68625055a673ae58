"""Services configured onto the OpenAI-format lane (`groq/`, `xai/`, `openai-compatible/` with `batch_api`), and a
gateway's extra headers and query per model, against `nspec emulator` through the real openai SDK."""

from __future__ import annotations

import json

import openai
import pytest

from nspec.compiler.providers.credentials import credentials
from tests.conftest import BASE
from tests.test_emulator import needle_prompt
from tests.test_runners import SPEC, assert_complete

pytestmark = pytest.mark.usefixtures("api_keys", "host_keys")


@pytest.fixture
def host_keys(monkeypatch):
    for name in ("GROQ_API_KEY", "XAI_API_KEY"):
        monkeypatch.setenv(name, "test-key")


def write_spec(tmp_path, entry):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(models=f"  - {entry}", trials=1, attempts=2, live_below=0))
    return spec


def test_groq_batches_with_its_own_window_and_key(emulator, tmp_path, cli):
    emu = emulator()
    entry = (
        f'{{id: groq/llama-3.3-70b-versatile, base_url: "{emu.groq_base_url}", batch_api: {{completion_window: 7d}}}}'
    )
    result = cli("run", str(write_spec(tmp_path, entry)), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    assert "groq/llama-3.3-70b-versatile → 127.0.0.1" in result.out and "GROQ_API_KEY" in result.out
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    assert {r["source"]["kind"] for r in assert_complete(run)} == {"batch"}  # Groq's lane is batch unless said
    (batch,) = emu.emulation.store.openai_batches.values()
    assert batch["flavour"] == "groq" and batch["completion_window"] == "7d"


@pytest.mark.parametrize(
    "entry, message",
    [
        ("{id: groq/llama-3.3-70b-versatile, batch_api: {completion_window: 8d}}", "groq takes a completion window"),
        ("{id: groq/llama-3.3-70b-versatile, endpoint: responses}", "`endpoint: responses` does not apply"),
        ('{id: groq/llama-3.3-70b-versatile, base_url: "https://gw.example.com/v1"}', "name the key meant for"),
        ("{id: anthropic/claude-haiku-4-5, batch_api: true}", "`batch_api` does not apply"),
    ],
)
def test_a_host_s_rules_are_checked_at_validate(cli, spec_file, entry, message):
    result = cli("validate", spec_file(BASE.replace("{id: openai/gpt-4.1-mini}", entry)))
    assert result.code == 2 and message in result.err, result.err


def test_groq_and_xai_need_no_base_url_and_send_their_key_home(monkeypatch):
    groq = credentials({"id": "groq/llama-3.1-8b-instant"})
    assert groq.base_url == "https://api.groq.com/openai/v1" and groq.variable == "GROQ_API_KEY"
    xai = credentials({"id": "xai/grok-4"})
    assert xai.base_url == "https://api.x.ai/v1" and xai.variable == "XAI_API_KEY"


def test_xai_runs_live_unless_told_of_a_batch_api(emulator, tmp_path, cli):
    emu = emulator(models=["grok-4"])
    entry = f'{{id: xai/grok-4, base_url: "{emu.openai_base_url}", api_key_env: XAI_API_KEY}}'
    result = cli("run", str(write_spec(tmp_path, entry)), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    assert {r["source"]["kind"] for r in assert_complete(run)} == {"live"}


def test_an_openai_compatible_batch_api_says_its_limits(emulator, tmp_path, cli):
    emu = emulator(models=["llama-3-8b"])
    entry = (
        f'{{id: openai-compatible/llama-3-8b, base_url: "{emu.openai_base_url}", api_key_env: OPENAI_API_KEY, '
        "mode: batch, batch_api: {max_requests: 3}}"
    )
    result = cli("run", str(write_spec(tmp_path, entry)), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    assert_complete(run)
    shards = sorted((run / "answers" / "requests").iterdir())
    assert len(shards) == 3 and all(len(s.read_text().splitlines()) <= 3 for s in shards)  # 8 cells, 3 a file


def test_a_gateway_gets_its_headers_and_query_and_never_the_key_in_them(emulator, tmp_path, cli, monkeypatch):
    emu = emulator()
    monkeypatch.setenv("GATEWAY_TOKEN", "s3cret")
    entry = (
        f'{{id: openai/gpt-4.1-mini, base_url: "{emu.openai_base_url}", mode: live, '
        '"headers": {X-Team: evals, X-Gateway-Token: {env: GATEWAY_TOKEN}}, query: {tenant: t1}}'
    )
    spec = write_spec(tmp_path, entry)
    result = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    chats = [s for s in emu.emulation.seen if s[1] == "/v1/chat/completions"]
    assert chats and all(
        h.get("x-team") == "evals" and h.get("x-gateway-token") == "s3cret" and q.get("tenant") == "t1"
        for _, _, q, h in chats
    )
    assert "s3cret" not in (tmp_path / "spec.yaml").read_text()
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    assert "s3cret" not in "".join(p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "headers, message",
    [
        ("{Authorization: Bearer x}", "`Authorization` is nspec's to set"),
        ("{X-Token: {env: NO_SUCH_VARIABLE_SET}}", None),
        ('{"bad header": x}', "an HTTP header name"),
    ],
)
def test_headers_are_checked(cli, spec_file, headers, message):
    entry = f"{{id: openai/gpt-4.1-mini, headers: {headers}}}"
    result = cli("validate", spec_file(BASE.replace("{id: openai/gpt-4.1-mini}", entry)))
    if message is None:
        assert result.code == 0, result.err  # the variable is read only when requests are sent
    else:
        assert result.code == 2 and message in result.err, result.err


def test_a_missing_header_variable_stops_before_anything_is_sent(emulator, tmp_path, cli):
    emu = emulator()
    entry = (
        f'{{id: openai/gpt-4.1-mini, base_url: "{emu.openai_base_url}", headers: {{X-T: {{env: NOT_SET_ANYWHERE}}}}}}'
    )
    result = cli("run", str(write_spec(tmp_path, entry)), "-o", str(tmp_path / "out"))
    assert result.code == 2 and "header X-T is read from NOT_SET_ANYWHERE, which is not set" in result.err
    assert not [s for s in emu.emulation.seen if s[1].startswith("/v1/")]


def test_the_emulator_speaks_groq_through_the_sdk(emulator):
    emu = emulator()
    client = openai.OpenAI(api_key="k", base_url=emu.groq_base_url, max_retries=0)
    reply = client.chat.completions.create(
        model="llama-3.1-8b-instant", messages=[{"role": "user", "content": needle_prompt(2)}]
    )
    assert "1000002" in reply.choices[0].message.content
    line = {
        "custom_id": "a",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "llama-3.1-8b-instant", "messages": [{"role": "user", "content": "x"}]},
    }
    uploaded = client.files.create(file=("in.jsonl", json.dumps(line).encode()), purpose="batch")
    with pytest.raises(openai.BadRequestError):
        client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="8d")
    assert client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="3d")
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}])
