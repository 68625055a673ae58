"""OpenAI's reasoning models and the Responses API: what a family refuses is a `validate` error naming the parameter,
the compiled lines are what OpenAI accepts, the emulator refuses exactly what OpenAI refuses (live and in batch
lines, in OpenAI's error shape), and a spec runs end to end on either endpoint through the real SDK."""

from __future__ import annotations

import json

import openai
import pytest

from nspec.runners.providers.openai_models import CHAT, RESPONSES, family, refusals
from tests.conftest import BASE
from tests.test_emulator import STEPPED, make_emulator, needle_prompt, oai  # noqa: F401 - fixtures
from tests.test_runners import SPEC, assert_complete, batches_on

pytestmark = pytest.mark.usefixtures("api_keys")


def with_model(entry: str, params: str = "") -> str:
    spec = BASE.replace("models: [{id: openai/gpt-4.1-mini}]", f"models: [{{id: {entry}{params}}}]")
    return spec.replace(
        'prompt: {user: "{haystack} {question}"}',
        'prompt: {user: "{haystack} {question}"}\ndefaults: {params: {temperature: 0, max_tokens: 300}}',
    )


@pytest.mark.parametrize(
    "model, params, refused",
    [
        (
            "openai/gpt-5",
            "",
            "models[0].params.temperature: openai/gpt-5 refuses this: Unsupported value: 'temperature' "
            "does not support 0 with this model. Only the default (1) value is supported. (OpenAI: unsupported_value)",
        ),
        ("openai/o3", "", "models[0].params.temperature: openai/o3 refuses this: Unsupported value: 'temperature'"),
        (
            "openai/gpt-4.1-mini",
            ", params: {reasoning_effort: low}",
            "models[0].params.reasoning_effort: "
            "openai/gpt-4.1-mini refuses this: Unsupported parameter: 'reasoning_effort' is not supported",
        ),
        (
            "openai/gpt-5.1",
            ", params: {reasoning_effort: minimal}",
            "Unsupported value: 'minimal' is not supported "
            "with the 'gpt-5.1' model. Supported values are: 'none', 'low', 'medium', and 'high'.",
        ),
        ("openai/gpt-4o", ", params: {verbosity: low}", "Unsupported parameter: 'verbosity'"),
    ],
)
def test_what_a_family_refuses_fails_validate_naming_the_parameter(cli, spec_file, model, params, refused):
    result = cli("validate", spec_file(with_model(model, params)))
    assert result.code == 2 and refused in result.err, result.err
    assert "max_tokens" not in result.err  # the answer budget is given in the name the endpoint takes


@pytest.mark.parametrize(
    "model, endpoint, expected",
    [
        ("openai/gpt-5, params: {temperature: null}", "chat", {"max_completion_tokens": 300}),
        ("openai/gpt-5.1", "chat", {"max_completion_tokens": 300, "temperature": 0}),  # no reasoning: sampling ok
        ("openai/gpt-4.1-mini", "chat", {"max_completion_tokens": 300, "temperature": 0}),
        (
            "openai/o3, params: {temperature: null, reasoning_effort: high, verbosity: null}",
            "responses",
            {"max_output_tokens": 300, "reasoning": {"effort": "high"}},
        ),
        (
            "openai/gpt-5-mini, params: {temperature: null, verbosity: low}",
            "responses",
            {"max_output_tokens": 300, "text": {"verbosity": "low"}},
        ),
    ],
)
def test_a_spec_written_like_the_examples_compiles_to_lines_openai_accepts(
    cli, spec_file, tmp_path, model, endpoint, expected
):
    spec = with_model(f"{model}, endpoint: {endpoint}")
    compiled = cli("compile", spec_file(spec), "-o", str(tmp_path / "out"))
    assert compiled.code == 0, compiled.err
    (shard,) = (tmp_path / "out").glob("t/*/answers/requests/*.jsonl")
    line = json.loads(shard.read_text().splitlines()[0])
    body = line["body"]
    assert line["url"] == (RESPONSES if endpoint == "responses" else CHAT)
    shape = ("model", "messages", "input", "instructions", "prompt_cache_key")
    assert {k: v for k, v in body.items() if k not in shape} == expected
    assert refusals(body, line["url"]) == []  # what the emulator (and OpenAI) check, line by line
    # GPT-5 models' cache hits are discounted in a batch: their cells carry their group's key; gpt-4.1's are not
    assert ("prompt_cache_key" in body) == ("gpt-5" in model)


def test_families():
    assert family("gpt-5-2025-08-07").name == "gpt-5" and family("gpt-5.1-codex").name == "gpt-5.1"
    assert family("gpt-5.4-mini").name == family("gpt-6-sol").name == "gpt-5.2 and later"
    assert family("gpt-5-chat-latest").name == family("gpt-4.1").name == "chat"
    assert family("o4-mini").name == "o-series" and family("o1-mini").system is False


def test_the_emulator_refuses_what_openai_refuses_live(make_emulator):  # noqa: F811
    client = oai(make_emulator())
    messages = [{"role": "user", "content": needle_prompt(1)}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-5", messages=messages, max_tokens=50)
    assert info.value.code == "unsupported_parameter" and info.value.param == "max_tokens"
    assert "Use 'max_completion_tokens' instead." in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="o3", input=needle_prompt(1), temperature=0)
    assert info.value.code == "unsupported_value" and info.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-4.1", messages=messages, reasoning_effort="low")
    assert info.value.param == "reasoning_effort"
    ok = client.chat.completions.create(model="gpt-5", messages=messages, max_completion_tokens=50)
    assert "1000001" in ok.choices[0].message.content


def test_the_responses_api_through_the_sdk(make_emulator):  # noqa: F811
    client = oai(make_emulator())
    response = client.responses.create(
        model="gpt-5-mini",
        instructions="Answer with the number only.",
        input=[{"role": "user", "content": needle_prompt(3)}],
        max_output_tokens=40,
        reasoning={"effort": "low"},
        text={"verbosity": "low"},
    )
    assert response.status == "completed" and "1000003" in response.output_text
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    cut = client.responses.create(model="gpt-4.1", input=needle_prompt(3), max_output_tokens=2)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    schema = {
        "type": "object",
        "properties": {"verdict": {"enum": ["aaa", "bbb"]}},
        "required": ["verdict"],
        "additionalProperties": False,
    }
    shaped = client.responses.create(
        model="gpt-4.1-mini",
        input="Grade it.\n\n<answer>aaa</answer>",
        text={"format": {"type": "json_schema", "name": "verdict", "schema": schema, "strict": True}},
    )
    assert shaped.output_text.startswith('{"verdict": ')  # shaped by the format (a cut-off one is a model's too)


def test_a_batch_line_openai_would_refuse_fails_as_that_line(make_emulator):  # noqa: F811
    emu = make_emulator()
    client = oai(emu)
    lines = [
        {
            "custom_id": "ok",
            "method": "POST",
            "url": CHAT,
            "body": {
                "model": "gpt-5",
                "messages": [{"role": "user", "content": needle_prompt(1)}],
                "max_completion_tokens": 40,
            },
        },
        {
            "custom_id": "refused",
            "method": "POST",
            "url": CHAT,
            "body": {"model": "gpt-5", "messages": [{"role": "user", "content": needle_prompt(2)}], "temperature": 0},
        },
    ]
    uploaded = client.files.create(
        file=("in.jsonl", "".join(json.dumps(x) + "\n" for x in lines).encode()), purpose="batch"
    )
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
    emu.clock.advance(3600)
    done = client.batches.retrieve(batch.id)
    assert done.status == "completed" and (done.request_counts.completed, done.request_counts.failed) == (1, 1)
    (error,) = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines()]
    assert error["custom_id"] == "refused" and error["response"]["status_code"] == 400
    assert error["response"]["body"]["error"]["code"] == "unsupported_value"
    assert error["response"]["body"]["error"]["param"] == "temperature"


@pytest.mark.parametrize("mode", ["batch", "live"])
def test_a_reasoning_model_runs_end_to_end_on_the_responses_api(emulator, tmp_path, cli, mode):
    emu = emulator()
    spec = tmp_path / "spec.yaml"
    model = (
        f'  - {{id: openai/gpt-5-mini, endpoint: responses, mode: {mode}, base_url: "{emu.openai_base_url}", '
        "params: {reasoning_effort: low, max_tokens: 40}}"
    )
    spec.write_text(
        SPEC.format(models=model, trials=1, attempts=2, live_below=0) + "scoring: [{contains: '{answer}'}]\n"
    )
    result = cli("run", str(spec), "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    got = assert_complete(run)
    assert all(r["status"] == "ok" and r["usage"]["input_tokens"] > 0 for r in got)
    cells = {c["cell_id"]: c for c in map(json.loads, (run / "cells.jsonl").read_text().splitlines())}
    for r in got:  # the answers were read from the Responses API's output items
        assert cells[r["cell_id"]]["negative"] or cells[r["cell_id"]]["expected"][0] in r["text"]
    assert batches_on(emu) == ((1, 0) if mode == "batch" else (0, 0))
