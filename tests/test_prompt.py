"""`Prompt(system, turns, prefill)` through every provider: a conversation of several turns reaches each API whole,
and a prefill goes where the model continues it, or at the end of the last user turn where it cannot."""

from __future__ import annotations

import asyncio

import pytest

from nspec.compiler.providers.io import Credentials
from nspec.compiler.providers.registry import provider
from nspec.prompt import Prompt, Turn
from nspec.runners.emulator.config import Responder
from nspec.runners.emulator.responders import Echo

CONVERSATION = Prompt(
    "Be brief.",
    (Turn("user", "Write a poem about tapirs."), Turn("assistant", "Tapirs roam."), Turn("user", "Once more:")),
    "Tapirs",
)

# provider entry → where the prefill goes: "turn" (a final assistant message) or "folded" (the last user turn)
ENTRIES = {
    "openai/gpt-4.1-mini": "folded",
    "openai-responses": "folded",
    "anthropic/claude-haiku-4-5": "turn",
    "anthropic/claude-sonnet-4-6": "folded",
    "google/gemini-2.5-flash": "folded",
    "mistral/mistral-small-latest": "turn",
    "together/meta-llama/Llama-3.3-70B-Instruct-Turbo": "folded",
    "local/gemma-3-270m": "turn",
}


def entry_of(name: str) -> dict:
    if name == "openai-responses":
        return {"id": "openai/gpt-4.1-mini", "endpoint": "responses"}
    return {"id": name}


def sent_turns(line: dict) -> list[tuple[str, str]]:
    """(role, text) of every message of a request line, the system prompt first, whatever the format."""
    if "params" in line:  # Anthropic
        body = line["params"]
        return [("system", body["system"])] + [(m["role"], m["content"]) for m in body["messages"]]
    if "request" in line:  # Gemini
        body = line["request"]
        system = [("system", body["systemInstruction"]["parts"][0]["text"])]
        return system + [(c["role"], c["parts"][0]["text"]) for c in body["contents"]]
    body = line["body"]
    if "input" in body:  # OpenAI's Responses API
        return [("system", body["instructions"])] + [(m["role"], m["content"]) for m in body["input"]]
    return [(m["role"], m["content"]) for m in body["messages"]]


def test_a_conversation_alternates_from_a_user_turn_to_a_user_turn():
    with pytest.raises(ValueError):
        Prompt(None, (Turn("user", "a"), Turn("assistant", "b")))
    with pytest.raises(ValueError):
        Prompt(None, (Turn("assistant", "a"), Turn("user", "b")))
    with pytest.raises(ValueError):
        Prompt(None, ())
    assert Prompt.ask("s", "u", " p").folded() == Prompt("s", (Turn("user", "u p"),))


@pytest.mark.parametrize("name", ENTRIES)
def test_every_provider_sends_every_turn_and_places_the_prefill(name):
    entry = entry_of(name)
    api = provider(entry["id"].split("/", 1)[0])
    line = api.request_line(entry, "c1", CONVERSATION, {}, 50)
    sent = sent_turns(line)
    model_role = "model" if name.startswith("google/") else "assistant"
    head = [
        ("system", "Be brief."),
        ("user", "Write a poem about tapirs."),
        (model_role, "Tapirs roam."),
    ]
    if ENTRIES[name] == "turn":
        assert sent == [*head, ("user", "Once more:"), ("assistant", "Tapirs")]
    else:
        assert sent == [*head, ("user", "Once more:Tapirs")]
    assert "Write a poem about tapirs." in api.prompt_text(line) and "Tapirs roam." in api.prompt_text(line)


LIVE = {
    "openai/gpt-4.1-mini": "openai_base_url",
    "openai-responses": "openai_base_url",
    "anthropic/claude-haiku-4-5": "anthropic_base_url",
    "google/gemini-2.5-flash": "google_base_url",
    "mistral/mistral-small-latest": "mistral_base_url",
    "together/meta-llama/Llama-3.3-70B-Instruct-Turbo": "together_base_url",
}


def test_every_api_answers_a_conversation(emulator, api_keys):
    """The real SDKs send each provider's line of a conversation, and the emulator reads its last user turn."""
    emu = emulator(responder=Responder(kind="echo"))
    assert isinstance(emu.emulation.responder, Echo)

    async def ask_all() -> dict[str, str | None]:
        answers = {}
        for name, url in LIVE.items():
            entry = entry_of(name)
            api = provider(entry["id"].split("/", 1)[0])
            client = api.live(Credentials("test-key", getattr(emu, url)), {})
            try:
                outcome, _ = await client.send(api.request_line(entry, "c1", CONVERSATION, {}, 50))
            finally:
                await client.close()
            assert outcome.status == "ok", (name, outcome.error)
            answers[name] = outcome.text
        return answers

    answers = asyncio.run(ask_all())
    # The echo is of the last user turn: with the prefill where the model cannot continue one.
    assert answers["openai/gpt-4.1-mini"] == "Once more:Tapirs"
    assert answers["google/gemini-2.5-flash"].endswith("Once more:Tapirs")
    assert "Tapirs" not in answers["anthropic/claude-haiku-4-5"]  # continued after the prefill
