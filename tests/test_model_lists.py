"""Each provider's free list of models, asked before the first paid request, through its real SDK against `nspec
emulator` (Gemini, Mistral, Together and Groq here; OpenAI and Anthropic in tests/test_runners.py and
tests/test_user_path.py): a misspelt id is refused at its line with "did you mean" before anything else is sent; the
names and dated versions the list gives pass; a key refused at the list is said then; a list a gateway does not serve
does not block the run; and the emulator's lists speak each provider's shape and refuse a wrong key as it does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from google import genai
from google.genai import errors as google_errors
from mistralai.client import Mistral
from mistralai.client import errors as mistral_errors

from nspec.runners.emulator.models import listed
from nspec.runners.emulator.server import Emulator
from tests.gateway import Gateway
from tests.test_runners import SPEC, assert_complete

pytestmark = pytest.mark.usefixtures("api_keys")


@dataclass(frozen=True)
class Lane:
    provider: str
    key_variable: str
    base_url: Callable[[Emulator], str]
    list_path: str  # under the base URL
    listed: str  # a name its list gives
    dated: str  # a dated version its list gives
    misspelt: str
    meant: str


LANES = [
    Lane(
        "google",
        "GEMINI_API_KEY",
        lambda emu: emu.google_base_url,
        "/v1/models",
        "gemini-2.5-flash",
        "gemini-2.5-flash-preview-09-2025",
        "gemini-2.5-flsh",
        "gemini-2.5-flash",
    ),
    Lane(
        "mistral",
        "MISTRAL_API_KEY",
        lambda emu: emu.mistral_base_url,
        "/v1/models",
        "mistral-small-latest",
        "mistral-small-2506",
        "mistral-smal-latest",
        "mistral-small-latest",
    ),
    Lane(
        "together",
        "TOGETHER_API_KEY",
        lambda emu: emu.together_base_url,
        "/v1/models",
        "meta-llama/Llama-3.3-70B-Instruct-Turbo",
        "Qwen/Qwen3-235B-A22B-Instruct-2507-tput",
        "meta-llama/Llama-3.3-70B-Instruct-Trubo",
        "meta-llama/Llama-3.3-70B-Instruct-Turbo",
    ),
    Lane(
        "groq",
        "GROQ_API_KEY",
        lambda emu: emu.groq_base_url,
        "/models",
        "llama-3.3-70b-versatile",
        "moonshotai/kimi-k2-instruct-0905",
        "llama-3.3-70b-versatle",
        "llama-3.3-70b-versatile",
    ),
]
lanes = pytest.mark.parametrize("lane", LANES, ids=[lane.provider for lane in LANES])


@pytest.fixture
def keys(monkeypatch):
    for lane in LANES:
        monkeypatch.setenv(lane.key_variable, "test-key")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)


def spec_text(lane: Lane, base_url: str, *models: str) -> str:
    entries = "\n".join(f'  - {{id: {lane.provider}/{m}, mode: live, base_url: "{base_url}"}}' for m in models)
    return SPEC.format(models=entries, trials=1, attempts=2, live_below=0)


def seen(emu: Emulator) -> list[tuple[str, str]]:
    return [(method, path) for method, path, *_ in emu.emulation.seen]


def list_path(lane: Lane, emu: Emulator) -> str:
    return urlsplit(lane.base_url(emu)).path + lane.list_path


@lanes
def test_a_misspelt_model_is_refused_at_its_line_before_anything_is_sent(emulator, cli, spec_file, keys, lane):
    emu = emulator()
    result = cli("run", spec_file(spec_text(lane, lane.base_url(emu), lane.misspelt)), "--wait", "-o", "out")
    assert result.code == 2, result.err
    said = result.err.strip()
    assert said.startswith(f"spec.yaml:13:10: models[0].id: '{lane.misspelt}' is not among the models {lane.provider}")
    assert said.endswith(f"did you mean {lane.provider}/{lane.meant}?")
    assert set(seen(emu)) == {("GET", list_path(lane, emu))} and not emu.emulation.answered  # the list only


@lanes
def test_the_names_and_dated_versions_its_list_gives_pass(emulator, cli, spec_file, keys, lane, tmp_path):
    emu = emulator()
    result = cli("run", spec_file(spec_text(lane, lane.base_url(emu), lane.listed, lane.dated)), "--wait", "-o", "out")
    assert result.code == 0, result.err
    (run,) = (tmp_path / "out" / "runner-test").iterdir()
    assert {r["model"] for r in assert_complete(run)} == {
        f"{lane.provider}/{lane.listed}",
        f"{lane.provider}/{lane.dated}",
    }
    assert seen(emu).count(("GET", list_path(lane, emu))) == 1  # one list per provider and address


@lanes
def test_a_key_the_list_refuses_is_said_before_anything_is_sent(emulator, cli, spec_file, keys, lane, monkeypatch):
    emu = emulator(api_key="right")
    monkeypatch.setenv(lane.key_variable, "wrong")
    result = cli("run", spec_file(spec_text(lane, lane.base_url(emu), lane.listed)), "--wait", "-o", "out")
    assert result.code == 2 and f"the key in {lane.key_variable} was refused" in result.err, result.err
    assert set(seen(emu)) == {("GET", list_path(lane, emu))} and not emu.emulation.answered


@lanes
@pytest.mark.parametrize("status", [200, 404, 500])
def test_a_list_a_gateway_does_not_serve_does_not_block_the_run(emulator, cli, spec_file, keys, lane, status):
    emu = emulator()
    base = lane.base_url(emu)
    with Gateway(base, lane.list_path, status) as gateway:
        result = cli(
            "run", spec_file(spec_text(lane, gateway.url + urlsplit(base).path, lane.listed)), "--wait", "-o", "out"
        )
    assert result.code == 0, result.err
    assert gateway.answered and emu.emulation.answered[lane.provider] > 0  # asked, not served, then run


def test_the_emulator_s_lists_speak_each_provider_s_shape(emulator):
    """Mistral's `{"object": "list", "data": [base model card]}`, Together's bare array, Gemini's pages of
    `models/<id>` and Groq's OpenAI list, through each one's SDK (Together's has no method for it: plain HTTP); a
    wrong key refused in each one's words."""
    extra = [f"extra-{i:02}" for i in range(60)]
    emu = emulator(api_key="k", models=extra)  # Gemini's list then takes two pages
    cards = Mistral(api_key="k", server_url=emu.mistral_base_url).models.list().data
    assert [(c.type, c.id) for c in cards] == [("base", name) for name in listed("mistral", extra)]
    with pytest.raises(mistral_errors.SDKError) as refused:
        Mistral(api_key="x", server_url=emu.mistral_base_url).models.list()
    assert refused.value.status_code == 401 and '"message":"Unauthorized"' in refused.value.body

    url = f"{emu.together_base_url}/v1/models"
    models = httpx.get(url, headers={"authorization": "Bearer k"}).json()
    assert isinstance(models, list) and [m["id"] for m in models] == listed("together", extra)
    assert all({"id", "object", "created", "type"} <= set(m) for m in models)
    wrong = httpx.get(url, headers={"authorization": "Bearer x"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"

    options = genai.types.HttpOptions(base_url=emu.google_base_url)
    gemini = genai.Client(api_key="k", http_options=options)  # held while its pager reads
    names = [m.name for m in gemini.models.list()]
    assert names == [f"models/{name}" for name in listed("google", extra)]
    assert [q.get("pageToken") for _, p, q, _ in emu.emulation.seen if p.startswith("/google/")] == [None, "50"]
    wrong_key = genai.Client(api_key="x", http_options=options)
    with pytest.raises(google_errors.ClientError) as bad_key:
        wrong_key.models.list()
    assert bad_key.value.code == 400 and "API key not valid" in str(bad_key.value.message)

    groq = openai.OpenAI(api_key="k", base_url=emu.groq_base_url, max_retries=0)
    assert [m.id for m in groq.models.list()] == listed("groq", extra)
    with pytest.raises(openai.AuthenticationError) as groq_refused:
        openai.OpenAI(api_key="x", base_url=emu.groq_base_url, max_retries=0).models.list()
    refusal = groq_refused.value.body
    assert {k: refusal[k] for k in ("message", "type", "code")} == {  # Groq's 401, as its API answers it
        "message": "Invalid API Key",
        "type": "invalid_request_error",
        "code": "invalid_api_key",
    }


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_gateway_s_page_for_openai_s_or_anthropic_s_list_does_not_block_the_run(emulator, cli, spec_file, provider):
    """A gateway answering the list with its own HTML page and status 200 is a list not read, never a crash."""
    emu = emulator()
    base = emu.openai_base_url if provider == "openai" else emu.anthropic_base_url
    model = "gpt-4.1-mini" if provider == "openai" else "claude-haiku-4-5"
    with Gateway(base, "/v1/models", 200) as gateway:
        through = gateway.url + urlsplit(base).path
        entry = f'  - {{id: {provider}/{model}, mode: live, base_url: "{through}"}}'
        spec = spec_file(SPEC.format(models=entry, trials=1, attempts=2, live_below=0))
        result = cli("run", spec, "--wait", "-o", "out")
    assert result.code == 0, result.err
    assert gateway.answered and emu.emulation.answered[provider] > 0
