"""A rehearsal: a spec run end to end against the emulator (`nspec run SPEC --emulator`), without editing the spec,
without keys, without paying. Its run directory lies apart from the real run's (``<out>/rehearsals/<name>/<run id>``)
and says so (``rehearsal.json``, naming the emulator), and every model of it — the judges and local models too — is
sent to that emulator: `Run.models` gives each its emulator's address and a key any emulator takes. The emulator is
the one listening on 127.0.0.1:8765 when there is one (started with faults, say: `nspec emulator --config FILE`), else
one started in this process on a port of its own (two rehearsals at once each have theirs), which keeps its batches
in the run directory (a rehearsal that stops goes on with the next one's). It is told the run (`POST /nspec/runs`),
so its oracle answers the run's cells with their expected answers: a rehearsal of any family scores 100% unless its
emulator is asked for faults.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nspec.errors import UserError

if TYPE_CHECKING:
    from nspec.runners.run_store import RunModel

PORT = 8765  # where `nspec emulator` listens by default
FOLDER = "rehearsals"  # under the output root: a rehearsal never shares a run directory with a real run
MARKER = "rehearsal.json"
KEY_VARIABLE = "NSPEC_REHEARSAL_KEY"  # the key a rehearsal sends (any emulator takes any key)
# Where each provider's API lies on an emulator (docs/emulator.md); a local model is asked through OpenAI's.
PATHS = {
    "openai": "/v1",
    "openai-compatible": "/v1",
    "local": "/v1",
    "anthropic": "",
    "google": "/google",
    "mistral": "/mistral",
    "azure": "/azure",
    "groq": "/groq/openai/v1",
    "together": "/together",
}


def emulator_of(run: Path) -> str | None:
    """The emulator a rehearsal's run directory is sent to (None: a real run)."""
    marker = run / MARKER
    if not marker.is_file():
        return None
    return str(json.loads(marker.read_text("utf-8"))["emulator"])


def rehearsed(model: RunModel, emulator: str) -> RunModel:
    """``model`` as a rehearsal sends it: to the emulator, with a key it takes; a local model to its OpenAI API."""
    if model.provider not in PATHS:
        raise UserError(f"{model.label}: the emulator does not speak {model.provider}'s API, so it cannot rehearse it")
    os.environ.setdefault(KEY_VARIABLE, "rehearsal")
    entry = {**model.entry, "base_url": emulator + PATHS[model.provider], "api_key_env": KEY_VARIABLE}
    provider = "openai-compatible" if model.provider == "local" else model.provider
    return replace(model, provider=provider, entry=entry)


def _hello(root: str) -> bool:
    """Whether an nspec emulator answers at ``root``."""
    try:
        with urllib.request.urlopen(root + "/nspec", timeout=2) as response:
            said: Any = json.load(response)
    except (OSError, ValueError, urllib.error.URLError):
        return False
    return isinstance(said, dict) and said.get("emulator") == "nspec"


@contextmanager
def emulator(run: Path, model_names: list[str]) -> Iterator[str]:
    """The emulator a rehearsal of ``run`` goes to, while inside: the one on 127.0.0.1:8765, else one of this
    process's own. It is told the run and the names
    its requests give models no provider serves (``model_names``), and the run directory is marked with it."""
    from nspec.runners.emulator import Emulator, EmulatorConfig

    root = f"http://127.0.0.1:{PORT}"
    started = None
    if not _hello(root):
        # On a port the OS picks, never 8765: another rehearsal would take it for one to share, and lose it when
        # this process ends.
        started = Emulator(EmulatorConfig(), port=0, state_dir=str(run / "emulator")).start()
        root = started.anthropic_base_url
    try:
        told = json.dumps({"run": str(run.resolve()), "models": model_names}).encode()
        request = urllib.request.Request(root + "/nspec/runs", told, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10):
            pass
        (run / MARKER).write_text(json.dumps({"emulator": root}) + "\n", encoding="utf-8")
        yield root
    finally:
        if started is not None:
            started.stop()
