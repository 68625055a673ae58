"""`nspec run SPEC --emulator`: a rehearsal of a spec as shipped — no edit, no key — against the emulator on the
rehearsal port or one started for it, in a run directory of its own; the emulator's oracle knows the run's cells,
so every family scores 100% unless that emulator was asked for faults."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from nspec.runners import rehearsal
from nspec.runners.emulator import Emulator, EmulatorConfig
from nspec.runners.emulator.config import Degrade, Responder
from tests.conftest import SPECS


@pytest.fixture(autouse=True)
def port(monkeypatch: pytest.MonkeyPatch) -> int:
    """A rehearsal port of the test's own (another test's emulator is not this one's to use), and no keys."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = int(probe.getsockname()[1])
    monkeypatch.setattr(rehearsal, "PORT", free)
    for name in ("OPENAI_API_KEY", "NSPEC_OPENAI_API_KEY", "ANTHROPIC_API_KEY", "NSPEC_ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return free


def test_graphwalks_rehearses_as_shipped_and_scores_every_cell(cli, tmp_path):
    result = cli("run", str(SPECS / "graphwalks.yaml"), "--emulator", "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    assert "scores: 24 pass\n" in result.out
    run = Path(next(line for line in result.out.splitlines() if line.startswith("run directory: ")).split(": ")[1])
    assert run.parent.parent == tmp_path / "out" / "rehearsals"  # never a real run's directory
    assert json.loads((run / "rehearsal.json").read_text())["emulator"].startswith("http://127.0.0.1:")
    assert "every model → the emulator at http://127.0.0.1:" in result.out


def test_an_emulator_already_listening_is_used_with_its_faults(cli, tmp_path, port):
    faulty = EmulatorConfig(responder=Responder(degrade=Degrade(miss_rate=0.5)))
    with Emulator(faulty, port=port) as emu:
        result = cli("run", str(SPECS / "mrcr.yaml"), "--emulator", "--wait", "-o", str(tmp_path / "out"))
        answered = len(emu.emulation.store.openai_batches) + len(emu.emulation.store.anthropic_batches)
    assert answered > 0
    assert result.code == 0, result.err
    verdicts = dict(reversed(part.split(" ")) for part in result.out.split("scores: ")[1].splitlines()[0].split(", "))
    assert int(verdicts["fail"]) > 0 and int(verdicts["pass"]) > 0  # its faults, not a perfect score


def test_a_local_model_is_rehearsed_through_the_emulator_too(cli, tmp_path):
    result = cli("run", str(SPECS / "quickstart.yaml"), "--emulator", "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    assert "scores: 12 pass\n" in result.out  # the negative controls too: the oracle knows them


def test_two_rehearsals_at_once_each_have_their_own_emulator(tmp_path):
    """One started for a rehearsal listens where no other rehearsal looks for one: a second run at the same time
    starts its own, and keeps it when the first ends."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    with rehearsal.emulator(first, []) as first_root:
        with rehearsal.emulator(second, []) as second_root:
            assert first_root != second_root and not rehearsal._hello(f"http://127.0.0.1:{rehearsal.PORT}")
        assert rehearsal._hello(first_root)
