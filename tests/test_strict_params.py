"""As strict as the real APIs: the parameters a line may carry follow the API version nspec sends and the model's
family; a spec that sets one where it cannot go is refused at `validate` (located, saying why) or, given by
`defaults:` to several providers, left out where it cannot go and said in the plan and the manifest; unknown keys are
refused (the rules' key lists are the SDKs' request types, compared here); the emulator refuses the same, by
`anthropic-version` and model, and never reports more output tokens than a request allows."""

from __future__ import annotations

import json
import typing

import anthropic
import openai
import pytest

from nspec.compiler.run_writer import compile_run
from nspec.prompt import Prompt
from nspec.runners.emulator.config import Responder
from nspec.runners.emulator.generation import (
    anthropic_message,
    count_tokens,
    counted_tokens,
    google_response,
    mistral_completion,
    openai_completion,
    openai_response,
)
from nspec.runners.emulator.responders import Echo
from nspec.runners.providers import anthropic_models, google, mistral, openai_models, together
from nspec.runners.providers.anthropic import PROVIDER as ANTHROPIC
from nspec.spec import load_spec
from tests.conftest import BASE, SPECS, shipped_specs
from tests.test_emulator import STEPPED, make_emulator, needle_prompt, oai  # noqa: F401 - fixtures

pytestmark = pytest.mark.usefixtures("api_keys")


def typed_keys(kind: typing.Any) -> set[str]:
    return set(kind.__required_keys__ | kind.__optional_keys__)


def with_models(models: str, extra: str = "") -> str:
    return BASE.replace("models: [{id: openai/gpt-4.1-mini}]", f"models: {models}") + extra


# -- the rules and the SDKs agree -------------------------------------------------------------------------------


def test_nspec_sends_the_version_the_anthropic_sdk_sends():
    from anthropic._constants import ANTHROPIC_API_VERSION

    assert anthropic_models.API_VERSION == ANTHROPIC_API_VERSION == "2026-10-21"


def test_the_key_lists_are_the_sdks_request_types():
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
    from mistralai.client.models import ChatCompletionRequest
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
    from together.types.chat.completion_create_params import CompletionCreateParamsNonStreaming as TogetherParams

    assert typed_keys(MessageCreateParamsNonStreaming) == anthropic_models.PARAMS
    assert not anthropic_models.PARAMS & set(anthropic_models.SAMPLING)  # gone in 2026-10-21
    assert typed_keys(CompletionCreateParamsNonStreaming) == openai_models.CHAT_PARAMS
    assert typed_keys(ResponseCreateParamsNonStreaming) == openai_models.RESPONSES_PARAMS
    assert set(ChatCompletionRequest.model_fields) == mistral.REQUEST_FIELDS
    assert typed_keys(TogetherParams) | {"stream"} == together.REQUEST_FIELDS


def test_gemini_generation_fields_are_the_sdks_where_the_gemini_api_has_them():
    from google.genai import types

    sdk = {google.camel(name) for name in types.GenerationConfig.model_fields}
    # The SDK's type serves Vertex AI and the Live API too; the Gemini API's REST reference lists imageConfig, which
    # the SDK keeps elsewhere.
    vertex_or_live = {
        "routingConfig",
        "modelSelectionConfig",
        "audioTimestamp",
        "enableAffectiveDialog",
        "translationConfig",
        "audioTranscriptionConfig",
        "responseFormat",
    }
    assert (sdk - vertex_or_live) | {"imageConfig"} == google.GENERATION_FIELDS


@pytest.mark.parametrize(
    "model, family",
    [
        ("claude-haiku-4-5-20251001", (4, 5)),
        ("claude-opus-4-7", (4, 7)),
        ("claude-sonnet-5", (5, 0)),
        ("claude-3-7-sonnet-latest", (3, 7)),
        ("claude-3-haiku", (3, 0)),
        ("claude-opus-4-20250514", (4, 0)),
        ("claude-mythos-5-1", (99, 0)),
        ("claude-new-name", (99, 0)),  # one nspec cannot place gets the newest rules
    ],
)
def test_claude_families(model, family):
    assert anthropic_models.family(model).generation == family


def test_the_anthropic_rules_by_version_and_model():
    def refused(version: str, model: str, **params: typing.Any) -> list[str]:
        body = {"model": model, "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], **params}
        return [r.message for r in anthropic_models.refusals(body, version)]

    new, old = anthropic_models.API_VERSION, anthropic_models.OLD_VERSION
    assert refused(new, "claude-haiku-4-5", temperature=0, top_k=5) == [
        "temperature: Extra inputs are not permitted",
        "top_k: Extra inputs are not permitted",
    ]
    assert refused(old, "claude-haiku-4-5", temperature=0, top_p=0.5) == []
    assert refused(old, "claude-opus-4-7", temperature=0) == ["temperature is deprecated for this model"]
    assert refused(old, "claude-sonnet-4-5", temperature=0, thinking={"type": "enabled", "budget_tokens": 1024}) == [
        "temperature may only be set to 1 when thinking is enabled",
        "`max_tokens` must be greater than `thinking.budget_tokens`.",
    ]
    assert refused(new, "claude-haiku-4-5", top_kk=1) == ["top_kk: Extra inputs are not permitted"]
    assert refused(new, "claude-opus-4-7", thinking={"type": "enabled", "budget_tokens": 2048}) == [
        '"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" and '
        '"output_config.effort" to control thinking behavior.'
    ]
    assert refused(new, "claude-haiku-4-5", thinking={"type": "adaptive"}) == [
        '"thinking.type.adaptive" is not supported for this model.'
    ]
    assert refused(new, "claude-sonnet-4-5", thinking={"type": "enabled", "budget_tokens": 500}) == [
        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    ]
    prefill = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "The answer is "}]
    assert refused(new, "claude-haiku-4-5", messages=prefill) == [
        "messages: final assistant content cannot end with trailing whitespace"
    ]
    assert refused(new, "claude-sonnet-4-6", messages=[*prefill[:1], {"role": "assistant", "content": "The"}]) == [
        "This model does not support assistant message prefill. The conversation must end with a user message."
    ]


def test_openai_refuses_keys_its_request_types_lack():
    body = {"model": "gpt-4.1", "messages": [], "top_kk": 1, "max_completion_tokens": 5}
    (refusal,) = openai_models.refusals(body, openai_models.CHAT)
    assert (refusal.param, refusal.code, refusal.message) == (
        "top_kk",
        None,
        "Unrecognized request argument supplied: top_kk",
    )
    assert openai_models.refusals(body, openai_models.CHAT, strict=False) == []  # another kind of server
    assert [r.param for r in openai_models.refusals({"model": "o3", "input": "x", "seed": 1}, openai_models.RESPONSES)]
    assert [
        r.param for r in openai_models.refusals({"model": "o3", "input": "x", "seed": 1}, openai_models.RESPONSES)
    ] == ["seed"]


# -- validate: refused where the spec says so, left out where defaults say so ------------------------------------


def test_a_sampling_parameter_of_a_claude_model_is_refused_located(cli, spec_file):
    result = cli("validate", spec_file(with_models("[{id: anthropic/claude-haiku-4-5, params: {temperature: 0}}]")))
    assert result.code == 2
    assert result.lines[:1] == [
        "spec.yaml:11:65: models[0].params.temperature: anthropic/claude-haiku-4-5 refuses this: Anthropic's API "
        "2026-10-21 takes no sampling parameters (temperature, top_p, top_k) on any model (Anthropic, "
        "anthropic-version 2026-10-21: temperature: Extra inputs are not permitted)"
    ]


@pytest.mark.parametrize(
    "model, message",
    [
        (
            "openai/gpt-4.1-mini",
            "models[0].params.top_kk: `top_kk` is no parameter of OpenAI's chat completions request (OpenAI answers "
            "400: Unrecognized request argument supplied: top_kk); check its name",
        ),
        (
            "openai/gpt-5, endpoint: responses",
            "models[0].params.top_kk: `top_kk` is no parameter of OpenAI's Responses request",
        ),
        (
            "anthropic/claude-haiku-4-5",
            "models[0].params.top_kk: anthropic/claude-haiku-4-5 refuses this: not a parameter of Anthropic's "
            "Messages request (Anthropic, anthropic-version 2026-10-21: top_kk: Extra inputs are not permitted)",
        ),
        ("google/gemini-2.5-flash", "models[0].params.top_kk: Gemini's generationConfig has no field 'topKk'"),
        ("mistral/mistral-small-latest", "Mistral's chat completion request has no parameter 'top_kk'"),
        ("together/deepseek-ai/DeepSeek-V3", "Together's chat completions request has no parameter 'top_kk'"),
        ("local/gemma-3-270m", "models[0].params.top_kk: the local engine does not support `top_kk` (it takes"),
    ],
)
def test_an_unknown_param_is_refused_for_every_provider_with_known_request_types(cli, spec_file, model, message):
    result = cli("validate", spec_file(with_models(f"[{{id: {model}, params: {{top_kk: 3}}}}]")))
    assert result.code == 2 and message in result.err, result.err


def test_an_openai_compatible_server_takes_its_own_extensions(cli, spec_file):
    entry = '{id: openai-compatible/llama, base_url: "http://127.0.0.1:8000/v1", params: {top_kk: 3, min_p: 0.1}}'
    assert cli("validate", spec_file(with_models(f"[{entry}]"))).code == 0


def test_defaults_go_only_where_they_can_and_the_plan_and_manifest_say_so(cli, spec_file, tmp_path):
    models = "[{id: openai/gpt-4.1-mini}, {id: anthropic/claude-haiku-4-5}]"
    spec = spec_file(with_models(models, "defaults: {params: {temperature: 0, max_tokens: 50}}\n"))
    loaded = load_spec(spec)
    assert [m["params"] for m in loaded.data["models"]] == [
        {"temperature": 0, "max_tokens": 50},
        {"temperature": None, "max_tokens": 50},  # left out: Claude's API takes none
    ]
    note = (
        "anthropic/claude-haiku-4-5: temperature left out of its requests (null in its params): Anthropic's "
        "Messages API (anthropic-version 2026-10-21): it takes no sampling parameters"
    )
    planned = cli("plan", spec)
    assert planned.code == 0 and note in " ".join(planned.out.split()), planned.out
    run = compile_run(loaded.data, loaded.base_dir, tmp_path / "out", {}).path
    manifest = json.loads((run / "manifest.json").read_text())
    (left,) = [n for n in manifest["fallbacks"] if n["kind"] == "left_out_params"]
    assert left == {
        "kind": "left_out_params",
        "model": "anthropic/claude-haiku-4-5",
        "params": ["temperature"],
        "message": note,
    }
    lines = {p.name: json.loads(p.read_text().splitlines()[0]) for p in (run / "answers" / "requests").iterdir()}
    claude = next(v for k, v in lines.items() if "claude" in k)["params"]
    gpt = next(v for k, v in lines.items() if "gpt" in k)["body"]
    assert "temperature" not in claude and claude["max_tokens"] == 50
    assert gpt["temperature"] == 0 and gpt["max_completion_tokens"] == 50


def test_a_default_no_model_takes_is_refused_at_the_defaults(cli, spec_file):
    spec = with_models("[{id: anthropic/claude-haiku-4-5}]", "defaults: {params: {temperature: 0}}\n")
    result = cli("validate", spec_file(spec))
    assert result.code == 2
    assert result.lines[0].startswith(
        "spec.yaml:12:34: models[0].params.temperature: anthropic/claude-haiku-4-5 "
        "refuses this: Anthropic's API 2026-10-21 takes no sampling parameters"
    )
    typo = with_models(
        "[{id: openai/gpt-4.1-mini}, {id: anthropic/claude-haiku-4-5}]", "defaults: {params: {top_kk: 1}}\n"
    )
    refused = cli("validate", spec_file(typo))
    assert refused.code == 2 and refused.lines[-1] == "2 errors in 1 of 1 file"  # one per model, at the defaults
    assert all(line.startswith("spec.yaml:12:29: models[") for line in refused.lines[:2])


def test_an_anthropic_prefill_that_ends_in_whitespace_is_refused(cli, spec_file):
    spec = with_models("\n  - id: anthropic/claude-haiku-4-5\n    prompt:\n      prefill: |\n        The number is\n")
    result = cli("validate", spec_file(spec))
    assert result.code == 2
    assert (
        "models[0].prompt.prefill: anthropic/claude-haiku-4-5 (models[0]) refuses a prefill that ends in whitespace "
        "(Anthropic: messages: final assistant content cannot end with trailing whitespace); remove it (in YAML, a "
        "block scalar written `|-` or `>-` keeps no final newline)"
    ) in result.err
    fixed = spec.replace("prefill: |", "prefill: |-")
    assert cli("validate", spec_file(fixed)).code == 0


def test_claude_4_6_and_later_take_no_prefill(cli, spec_file):
    spec = with_models('[{id: anthropic/claude-sonnet-4-6, prompt: {prefill: "The number is"}}]')
    result = cli("validate", spec_file(spec))
    assert result.code == 2
    assert (
        "models[0].prompt.prefill: anthropic/claude-sonnet-4-6 (models[0]) cannot continue a prefill: Claude 4.6 "
        "and later do not continue a prefill (Anthropic: This model does not support assistant message prefill. "
        "The conversation must end with a user message.)"
    ) in result.err


def test_claude_thinking_follows_the_model(cli, spec_file):
    spec = with_models("[{id: anthropic/claude-opus-4-7, params: {thinking: {type: enabled, budget_tokens: 2048}}}]")
    result = cli("validate", spec_file(spec))
    assert result.code == 2 and '"thinking.type.enabled" is not supported for this model.' in result.err
    small = with_models("[{id: anthropic/claude-sonnet-4-5, params: {thinking: {type: enabled, budget_tokens: 100}}}]")
    assert "budget_tokens is at least 1024" in cli("validate", spec_file(small)).err
    # With no max_tokens, the answer budget is reserve_tokens (300 here): a budget_tokens of 1024 does not fit in it.
    over = with_models("[{id: anthropic/claude-sonnet-4-5, params: {thinking: {type: enabled, budget_tokens: 1024}}}]")
    result = cli("validate", spec_file(over))
    assert result.code == 2
    assert (
        "models[0].params: anthropic/claude-sonnet-4-5 refuses this: thinking tokens count against max_tokens "
        "(Anthropic, anthropic-version 2026-10-21: `max_tokens` must be greater than `thinking.budget_tokens`.); "
        "with no max_tokens its answer budget is reserve_tokens (300): set max_tokens, or raise reserve_tokens"
    ) in result.err


def test_the_anthropic_version_header_is_nspecs(cli, spec_file):
    spec = with_models('[{id: anthropic/claude-haiku-4-5, headers: {anthropic-version: "2023-06-01"}}]')
    result = cli("validate", spec_file(spec))
    assert result.code == 2 and "`anthropic-version` is nspec's to set" in result.err


def test_nspec_sends_the_anthropic_version_its_rules_follow(make_emulator):  # noqa: F811
    from nspec.compiler.providers.io import Credentials

    emu = make_emulator()
    creds = Credentials("k", emu.anthropic_base_url, headers={"x-gateway": "g"})
    ANTHROPIC.token_counter(creds).count({"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": "hi"}]})
    method, path, _, headers = emu.emulation.seen[-1]
    assert (method, path) == ("POST", "/v1/messages/count_tokens")
    assert headers["anthropic-version"] == anthropic_models.API_VERSION and headers["x-gateway"] == "g"


def test_claude_lines_take_the_specs_answer_budget():
    entry = {"id": "anthropic/claude-haiku-4-5"}
    for params in ({"max_tokens": 20}, {"max_completion_tokens": 20}):
        line = ANTHROPIC.request_line(entry, "c", Prompt.ask(None, "u"), params, 50)
        assert line["params"]["max_tokens"] == 20 and set(line["params"]) == {"model", "max_tokens", "messages"}
    left_out = ANTHROPIC.request_line(entry, "c", Prompt.ask(None, "u"), {"temperature": None}, 50)
    assert "temperature" not in left_out["params"] and left_out["params"]["max_tokens"] == 50


# -- the emulator refuses the same ------------------------------------------------------------------------------


def claude(emu, version: str | None = None):
    headers = {"anthropic-version": version} if version else {}
    return anthropic.Anthropic(
        api_key="k",
        base_url=emu.anthropic_base_url,
        max_retries=0,
        _strict_response_validation=True,
        default_headers=headers,
    )


def test_the_emulator_refuses_by_anthropic_version_and_model(make_emulator):  # noqa: F811
    emu = make_emulator()
    messages = [{"role": "user", "content": needle_prompt(1)}]
    with pytest.raises(anthropic.BadRequestError) as info:  # SDK 2.x: 2026-10-21
        claude(emu).messages.create(
            model="claude-haiku-4-5", max_tokens=50, messages=messages, extra_body={"temperature": 0}
        )
    assert info.value.body["error"] == {
        "type": "invalid_request_error",
        "message": "temperature: Extra inputs are not permitted",
    }
    old = claude(emu, anthropic_models.OLD_VERSION)
    ok = old.messages.create(model="claude-haiku-4-5", max_tokens=50, messages=messages, extra_body={"temperature": 0})
    assert "1000001" in ok.content[0].text
    with pytest.raises(anthropic.BadRequestError) as info:
        old.messages.create(model="claude-opus-4-7", max_tokens=50, messages=messages, extra_body={"temperature": 0})
    assert info.value.body["error"]["message"] == "temperature is deprecated for this model"
    with pytest.raises(anthropic.BadRequestError) as info:
        claude(emu, "2024-01-01").messages.create(model="claude-haiku-4-5", max_tokens=50, messages=messages)
    assert info.value.body["error"]["message"] == "anthropic-version: invalid version '2024-01-01'"


def test_the_emulator_errors_every_batch_line_its_version_refuses(make_emulator):  # noqa: F811
    emu = make_emulator()

    def request(i: int, **params):
        messages = [{"role": "user", "content": needle_prompt(i)}]
        return {
            "custom_id": f"r{i}",
            "params": {"model": "claude-haiku-4-5", "max_tokens": 40, "messages": messages, **params},
        }

    results = {}
    for version in (None, anthropic_models.OLD_VERSION):
        client = claude(emu, version)
        batch = client.messages.batches.create(requests=[request(0, temperature=0), request(1)])
        emu.clock.advance(3600)
        results[version] = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    refused = results[None]["r0"]
    assert refused.type == "errored" and refused.error.error.message == "temperature: Extra inputs are not permitted"
    assert results[None]["r1"].type == "succeeded"
    assert {r.type for r in results[anthropic_models.OLD_VERSION].values()} == {"succeeded"}


def test_the_emulator_refuses_unknown_openai_arguments_live_and_per_line(make_emulator):  # noqa: F811
    emu = make_emulator(models=["llama-3-8b"])
    client = oai(emu)
    messages = [{"role": "user", "content": needle_prompt(1)}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-4.1", messages=messages, extra_body={"top_kk": 3})
    assert info.value.body == {
        "message": "Unrecognized request argument supplied: top_kk",
        "type": "invalid_request_error",
        "param": "top_kk",
        "code": None,
    }
    served = client.chat.completions.create(  # a server of its own (vLLM's extension)
        model="llama-3-8b", messages=messages, extra_body={"continue_final_message": False}
    )
    assert served.choices[0].message.content
    line = {
        "custom_id": "a",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "gpt-4.1", "messages": messages, "top_kk": 3},
    }
    uploaded = client.files.create(file=("in.jsonl", json.dumps(line).encode()), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    emu.clock.advance(3600)
    done = client.batches.retrieve(batch.id)
    (error,) = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines()]
    assert error["response"]["status_code"] == 400
    assert error["response"]["body"]["error"]["message"] == "Unrecognized request argument supplied: top_kk"


LONG = " ".join(f"word{i} ünïcödé 🙂 的 " for i in range(200))


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 8, 13, 40])
def test_the_emulator_never_reports_more_output_tokens_than_allowed(limit):
    echo = Echo()
    user = [{"role": "user", "content": LONG}]
    chat = openai_completion({"model": "gpt-4.1", "messages": user, "max_tokens": limit}, echo, "k", 0)
    assert chat["usage"]["completion_tokens"] == count_tokens(chat["choices"][0]["message"]["content"]) <= limit
    response = openai_response({"model": "gpt-4.1", "input": LONG, "max_output_tokens": limit}, echo, "k", 0)
    assert response["usage"]["output_tokens"] <= limit
    message = anthropic_message({"model": "claude-haiku-4-5", "messages": user, "max_tokens": limit}, echo, "k")
    assert message["usage"]["output_tokens"] == counted_tokens(message["content"][0]["text"]) <= limit
    request = {
        "model": "models/gemini-2.5-flash",
        "contents": [{"role": "user", "parts": [{"text": LONG}]}],
        "generationConfig": {"maxOutputTokens": limit},
    }
    assert google_response(request, echo, "k")["usageMetadata"]["candidatesTokenCount"] <= limit
    prefixed = [*user, {"role": "assistant", "content": "Here it is:", "prefix": True}]
    mistral_reply = mistral_completion(
        {"model": "mistral-small-latest", "messages": prefixed, "max_tokens": limit}, echo, "k", 0
    )
    text = mistral_reply["choices"][0]["message"]["content"]
    assert mistral_reply["usage"]["completion_tokens"] == count_tokens(text) <= limit


def test_an_emulated_reasoning_model_spends_its_reasoning_first():
    echo = Echo()
    user = [{"role": "user", "content": "What is the code? aaa"}]
    spent = openai_completion({"model": "o3", "messages": user, "max_completion_tokens": 16}, echo, "k", 0, 0.125)
    assert spent["choices"][0]["message"]["content"] == "" and spent["choices"][0]["finish_reason"] == "length"
    assert spent["usage"]["completion_tokens"] == spent["usage"]["completion_tokens_details"]["reasoning_tokens"] == 16
    low = {"model": "o3", "messages": user, "max_completion_tokens": 2048 + 16, "reasoning_effort": "low"}
    room = openai_completion(low, echo, "k", 0, 0.125)
    assert room["choices"][0]["message"]["content"].endswith("aaa")
    assert room["usage"]["completion_tokens_details"]["reasoning_tokens"] == 256  # an eighth of low's 2,048
    plain = openai_completion({"model": "gpt-4.1", "messages": user, "max_tokens": 16}, echo, "k", 0, 0.125)
    assert plain["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0


# -- reasoning models: budgets that fit -------------------------------------------------------------------------


def judge(entry: dict):
    from nspec.compiler.judge_prompts import JUDGE_ANSWER_TOKENS
    from nspec.compiler.models import models_of
    from nspec.compiler.run_writer import judge_budget

    (model,) = models_of({"models": [entry]})
    return judge_budget(model, JUDGE_ANSWER_TOKENS)


@pytest.mark.parametrize(
    "entry, params, budget",
    [
        ({"id": "openai/gpt-4.1"}, {}, 16),
        ({"id": "openai/o3"}, {"reasoning_effort": "low"}, 2048 + 16),
        ({"id": "openai/gpt-5-mini"}, {"reasoning_effort": "minimal"}, 512 + 16),
        ({"id": "openai/gpt-5.1"}, {}, 16),  # gpt-5.1 reasons only when asked to
        ({"id": "openai/o3", "params": {"reasoning_effort": "high"}}, {"reasoning_effort": "high"}, 16384 + 16),
        ({"id": "openai/o3", "params": {"max_tokens": 4000}}, {"reasoning_effort": "low", "max_tokens": 4000}, 4000),
        ({"id": "anthropic/claude-sonnet-4-5"}, {}, 16),
        ({"id": "anthropic/claude-mythos-5"}, {"output_config": {"effort": "low"}}, 2048 + 16),
        (
            {"id": "anthropic/claude-sonnet-4-5", "params": {"thinking": {"type": "enabled", "budget_tokens": 1024}}},
            {"thinking": {"type": "enabled", "budget_tokens": 1024}},
            1024 + 16,
        ),
        ({"id": "google/gemini-2.5-flash"}, {"thinking_config": {"thinkingBudget": 0}}, 16),
        ({"id": "google/gemini-2.5-pro"}, {"thinking_config": {"thinkingBudget": 128}}, 128 + 16),
        ({"id": "google/gemini-3-pro-preview"}, {"thinking_config": {"thinkingLevel": "low"}}, 2048 + 16),
        ({"id": "google/gemini-2.0-flash"}, {}, 16),
    ],
)
def test_a_judge_that_reasons_gets_room_for_it_at_its_least_effort(entry, params, budget):
    assert judge(entry) == (params, budget)


def test_a_reasoning_model_with_too_small_a_budget_is_warned(spec_file):
    spec = with_models("[{id: openai/o3, params: {max_tokens: 20}}]")
    (warned,) = load_spec(spec_file(spec)).warnings
    assert str(warned) == (
        "spec.yaml:11:47: models[0].params.max_tokens: openai/o3 reasons (at reasoning_effort medium, its default), "
        "and its reasoning counts against max_tokens (20): it may use it all before it answers; allow more than "
        "8,192 tokens (raise max_tokens and reserve_tokens), or have it reason less (reasoning_effort: low)"
    )
    by_reserve = load_spec(spec_file(with_models("[{id: google/gemini-2.5-pro}]"))).warnings
    assert [w.path for w in by_reserve] == ["models[0].id"]
    assert "its answer budget, reserve_tokens (300)" in by_reserve[0].message
    judged = with_models(
        "[{id: openai/gpt-4.1}]", "scoring:\n  - judge: {models: [{id: openai/o3, params: {max_tokens: 60}}]}\n"
    )
    (judge_warning,) = load_spec(spec_file(judged)).warnings
    assert judge_warning.path == "scoring[0].judge.models[0].params.max_tokens"
    assert "openai/o3 reasons (at reasoning_effort low)" in judge_warning.message
    quiet = with_models(
        "[{id: openai/gpt-5.1, params: {max_tokens: 20}}, {id: openai/o3, params: {reasoning_effort: low}}]",
        "scoring:\n  - judge: {models: [openai/o3]}\n",
    )
    quiet = quiet.replace(
        'prompt: {user: "{haystack} {question}"}', 'prompt: {user: "{haystack} {question}", reserve_tokens: 4000}'
    )
    quiet = quiet.replace("context_lengths: [1000]", "context_lengths: [8000]")
    assert load_spec(spec_file(quiet)).warnings == []


def test_a_reasoning_judge_gives_verdicts_where_sixteen_tokens_gave_none(make_emulator):  # noqa: F811
    from nspec.compiler.models import models_of
    from nspec.runners.grading.judging import Grading

    emu = make_emulator(responder=Responder(reasoning_share=0.125))
    client = oai(emu)
    cell = {"question": "What is the code?", "expected": ["1234567"], "negative": False, "needles": []}
    (o3,) = models_of({"models": [{"id": "openai/o3"}]})
    grading = Grading.of({"rubric": "pass-fail"})
    line = grading.request(o3, cell, "The code is 1234567.", "c-1")
    assert line["body"]["reasoning_effort"] == "low" and line["body"]["max_completion_tokens"] == 2048 + 16
    reply = client.chat.completions.create(**line["body"])
    assert grading.read(reply.choices[0].message.content).vote == "pass"
    assert reply.usage.completion_tokens_details.reasoning_tokens == 256
    # What a judge of 16 tokens got: its reasoning took them all, and the reply held no verdict.
    cut = client.chat.completions.create(**{**line["body"], "max_completion_tokens": 16})
    assert cut.choices[0].finish_reason == "length"
    assert grading.read(cut.choices[0].message.content or "").vote is None


# -- the shipped specs compile to lines the APIs accept ------------------------------------------------------------


def accepted(api, line: dict) -> list[str]:
    """What the API of ``api`` (a provider) would refuse in one request line, by nspec's rules and its SDK's types."""
    if api.name == "anthropic":
        refused = anthropic_models.refusals(line["params"])
        return [r.message for r in refused] + sorted(set(line["params"]) - anthropic_models.PARAMS)
    if api.name == "openai":
        return [r.message for r in openai_models.refusals(line["body"], line["url"])]
    return []


# quickstart.yaml's only model runs on this machine: no API's rules apply to its lines.
@pytest.mark.parametrize("name", sorted(p.name for p in shipped_specs() if p.name != "quickstart.yaml"))
def test_every_shipped_spec_compiles_to_lines_the_apis_accept(name, tmp_path, monkeypatch):
    from nspec.compiler import grid as grid_axes
    from nspec.compiler.models import models_of
    from nspec.runners.grading.judging import Grading

    monkeypatch.chdir(SPECS.parent)
    loaded = load_spec(f"specs/{name}")
    # NIAN's Mistral 7B judge has no price in the table (none of Mistral's has): said, not refused
    unpriced = ["no price is known for 'mistral/open-mistral-7b'"] if name == "nian.yaml" else []
    assert [w.message.split(",")[0] for w in loaded.warnings] == unpriced
    spec = loaded.data  # one cell per model and prompt: the params are the same at every length
    grid = spec["grid"]
    grid.update(context_lengths=[min(grid_axes.context_lengths(grid["context_lengths"]))], depths=[50], trials=1)
    run = compile_run(spec, loaded.base_dir, tmp_path, {}).path
    apis = {m.slug: m.api for m in models_of(spec)}
    lines = 0
    for shard in (run / "answers" / "requests").iterdir():
        api = next(a for slug, a in apis.items() if shard.name.startswith(slug))
        for text in shard.read_text().splitlines():
            assert accepted(api, json.loads(text)) == [], shard.name
            lines += 1
    assert lines
    judging = next((s["judge"] for s in spec.get("scoring", []) if "judge" in s), None)
    cell = json.loads((run / "cells.jsonl").read_text().splitlines()[0])
    for model in models_of({"models": judging["models"]}) if judging else []:
        line = Grading.of(judging).request(model, cell, "an answer", "judge-1")
        assert accepted(model.api, line) == [], model.label


def test_params_of_an_entry_the_schema_refuses_are_not_checked_into_a_crash(cli, spec_file):
    spec = with_models("[{id: openai/gpt-4.1-mini, endpoint: foo}]", "defaults: {params: {temperature: 0}}\n")
    result = cli("validate", spec_file(spec))
    assert result.code == 2 and "models[0].endpoint: must be one of: chat, responses" in result.err


def test_a_default_a_model_takes_only_at_other_values_is_left_out_and_said():
    from nspec.compiler.models import models_of
    from nspec.compiler.run_writer import left_out_notes

    spec = {
        "models": [
            {"id": "openai/gpt-5", "params": {"reasoning_effort": "minimal"}},
            {"id": "openai/o3", "params": {"reasoning_effort": None}},
            {"id": "anthropic/claude-opus-4-7", "params": {"thinking": None}},
        ]
    }
    notes = left_out_notes(spec, models_of(spec))
    assert [n["message"] for n in notes] == [
        "openai/o3: reasoning_effort left out of its requests (null in its params): o3 takes reasoning_effort low, "
        "medium, high (OpenAI)",
        "anthropic/claude-opus-4-7: thinking left out of its requests (null in its params): anthropic/claude-opus-4-7 "
        "takes thinking of type adaptive or disabled (Anthropic)",
    ]
