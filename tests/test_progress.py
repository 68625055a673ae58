"""What a user sees while a run works: where stderr is not a terminal (CI, `| tee`), a progress line every few seconds
of the clock, never one per request; and a line while a local model loads, wherever it loads (a compile's tokenizer,
a provider's first answer), though no listener is passed that deep."""

from __future__ import annotations

from pathlib import Path

import pytest

from nspec.events import Event, announce
from nspec.progress import ProgressLines as _ProgressLines
from nspec.progress import ProgressView as _Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_progress_is_a_line_every_few_seconds(capsys):
    clock = Clock()
    with _Progress(clock) as show:
        show(Event("live-start", "answers", "local", total=50))
        for i in range(50):  # one answer a second: 50 answers, 5 progress lines
            clock.now += 1
            show(Event("live-result", "answers", "local", cost_usd=0.001 * (i + 1)))
        show(Event("live-end", "answers", "local"))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "answers: 50 local requests to send"
    assert lines[1] == "answers: 10/50 local requests, 1.0/s, $0.0100; 10s so far"
    assert lines[4] == "answers: 40/50 local requests, 1.0/s, $0.0400; 40s so far"
    assert lines[-1] == "answers: 50/50 local requests, 1.0/s, $0.0500; done in 50s"
    assert len(lines) == 6  # the 50th is said once, at the end


def test_slow_answers_are_paced_in_seconds_each(capsys):
    clock = Clock()
    lines = _ProgressLines(clock)
    lines.show(Event("live-start", "answers", "local", total=12))
    clock.now += 25
    lines.show(Event("live-result", "answers", "local"))
    assert capsys.readouterr().err.splitlines()[-1] == "answers: 1/12 local requests, 25.0s each, $0.0000; 25s so far"


def test_a_model_loading_is_said_to_the_installed_listener(capsys):
    announce(Event("loading", detail="nowhere (1 MB)"))  # no listener installed: heard by nobody
    with _Progress():
        announce(Event("loading", detail="gemma-3-270m (253 MB)"))
        announce(Event("loaded", detail="gemma-3-270m", delay=3.21))
    announce(Event("loaded", detail="nowhere", delay=1))
    assert capsys.readouterr().err.splitlines() == ["loading gemma-3-270m (253 MB)…", "gemma-3-270m loaded in 3.2s"]


def test_the_local_engine_says_when_it_loads_a_model(monkeypatch, tmp_path):
    from nspec.events import listening
    from nspec.runners.providers import local

    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"\0" * 2_000_000)
    monkeypatch.setattr(local, "Engine", lambda path, slots: ("engine", Path(path).name, slots))
    monkeypatch.setattr(local, "_engines", {})
    heard: list[Event] = []
    with listening(heard.append):
        assert local.engine(str(model)) == ("engine", "tiny.gguf", 1)
        local.engine(str(model))  # loaded once per process: said once
    assert [(e.name, e.detail) for e in heard] == [("loading", f"{model} (2 MB)"), ("loaded", str(model))]


@pytest.mark.parametrize("event", ["waiting", "compiled", "destinations"])
def test_other_events_make_no_progress_line(capsys, event):
    lines = _ProgressLines(Clock())
    lines.show(Event(event, pending=3, delay=5, detail="x"))
    assert capsys.readouterr().err == ""
