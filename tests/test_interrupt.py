"""A run that talks and stops when asked: progress where no terminal is, every few seconds even while one request
takes long (a local prompt being read); Ctrl-C stops at once, says what is saved and the command that goes on, and
that command sends only what had not come back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from nspec.events import Event
from nspec.progress import ProgressLines
from nspec.runners.emulator.config import Timing
from nspec.runners.providers import SDK_RETRIES_ENV
from tests.conftest import BASE


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_long_request_is_said_every_few_seconds_with_the_prompt_it_reads(capsys):
    clock = Clock()
    lines = ProgressLines(clock)
    lines.show(Event("live-start", "answers", "local", total=4))
    for processed in (0, 512, 1024):
        clock.now += 6  # one batch of the prompt read every 6 seconds, no answer yet
        lines.show(Event("request-progress", kind="local/gemma-3-270m", total=2000, done=processed))
        lines.tick()
    clock.now += 6
    lines.tick()
    said = capsys.readouterr().err.splitlines()
    assert said == [
        "answers: 4 local requests to send",
        "answers: 0/4 local requests, -/s, $0.0000; 12s so far; local/gemma-3-270m: reading the prompt, "
        "512/2,000 tokens, 85 tokens/s, about 17s left",
        "answers: 0/4 local requests, -/s, $0.0000; 24s so far; local/gemma-3-270m: reading the prompt, "
        "1,024/2,000 tokens, 85 tokens/s, about 5s left",
    ]


def test_a_download_is_said_every_few_seconds_and_when_it_ends(capsys):
    clock = Clock()
    lines = ProgressLines(clock)
    for done in (0, 10_000_000, 30_000_000):
        lines.show(Event("download", "data", "hotpotqa/hotpot_dev_distractor_v1.json", total=46_320_117, done=done))
        clock.now += 5
        lines.tick()
    lines.show(Event("download", "data", "hotpotqa/hotpot_dev_distractor_v1.json", total=46_320_117, done=46_320_117))
    assert capsys.readouterr().err.splitlines() == [
        "hotpotqa/hotpot_dev_distractor_v1.json: 10.0 MB of 46.3 MB, 1.0 MB/s, about 36s left",
        "hotpotqa/hotpot_dev_distractor_v1.json: 46.3 MB in 15s",
    ]


def test_the_local_engine_says_how_far_it_has_read_a_long_prompt():
    from nspec.events import listening
    from nspec.runners.providers.local import engine

    heard: list[tuple[int, int]] = []
    body = {
        "model": "gemma-3-270m",
        "messages": [{"role": "user", "content": "Tea and toast. " * 200}],
        "max_tokens": 2,
    }
    with listening(lambda e: None):
        engine("gemma-3-270m").complete(body, "k", lambda done, total: heard.append((done, total)))
    total = heard[-1][1]
    assert total > 512 and heard[-1][0] == total  # read to the end, in batches of 512 tokens
    assert [done for done, _ in heard] == sorted(done for done, _ in heard) and len(heard) >= 3


def spec(url: str) -> str:
    """Ten cells, asked one at a time of a live model that takes a while to answer."""
    grid = "grid: {context_lengths: [1000], depths: [0, 25, 50, 75, 100], trials: 2}"
    model = f'models: [{{id: openai/gpt-4.1-mini, mode: live, base_url: "{url}", rate_limits: {{concurrency: 1}}}}]'
    return BASE.replace("grid: {context_lengths: [1000], depths: [50]}", grid).replace(
        "models: [{id: openai/gpt-4.1-mini}]", model
    )


def test_ctrl_c_stops_says_what_is_saved_and_the_same_command_sends_only_the_rest(emulator, tmp_path):
    emu = emulator(timing=Timing(live_latency_seconds=0.4))
    (tmp_path / "spec.yaml").write_text(spec(emu.openai_base_url))
    command = [sys.executable, "-m", "nspec", "run", "spec.yaml", "--wait"]
    env = {**os.environ, "OPENAI_API_KEY": "k", SDK_RETRIES_ENV: "0"}
    running = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    results = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until two answers are saved
        found = list((tmp_path / "outputs").glob("t/*/answers/results.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= 2:
            results = found[0]
            break
        time.sleep(0.05)
    assert results is not None
    running.send_signal(signal.SIGINT)
    _, err = running.communicate(timeout=30)
    assert running.returncode == 130, err
    saved = len(results.read_text().splitlines())
    assert 2 <= saved < 10
    assert "interrupted: " in err and f"saved in {results.relative_to(tmp_path)}" in err
    assert err.rstrip().endswith("Go on with: nspec run spec.yaml --wait")
    asked = answered_once_idle(emu.emulation)
    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"answers: {10 - saved} live requests to send" in again.stderr
    assert emu.emulation.answered["openai"] - asked == 10 - saved  # none of the saved ones asked again
    ids = [json.loads(line)["cell_id"] for line in results.read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 10


def answered_once_idle(emulation) -> int:
    """The live answers given once the requests the stopped run left in flight are done (the emulator finishes a
    request its client went away from, and counts it)."""
    deadline, idle_since = time.monotonic() + 30, None
    while time.monotonic() < deadline:
        if emulation.handling:
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > 0.3:  # idle, and no request of the stopped run arrives late
            return emulation.answered["openai"]
        time.sleep(0.02)
    raise AssertionError("the emulator is still handling a request 30 s after the run stopped")


def test_a_second_ctrl_c_quits_at_once():
    script = (
        "import signal, time\n"
        "from nspec import interrupt\n"
        "from nspec.progress import ProgressView\n"
        "with ProgressView(terminal=False):\n"
        "    with interrupt.watching():\n"
        "        print('ready', flush=True)\n"
        "        time.sleep(30)\n"
    )
    running = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert running.stdout is not None and running.stdout.readline() == "ready\n"
    running.send_signal(signal.SIGINT)
    time.sleep(0.2)
    running.send_signal(signal.SIGINT)
    _, err = running.communicate(timeout=10)
    assert running.returncode == 130
    assert err.splitlines() == [
        "stopping: what came back is being saved (Ctrl-C again quits at once)",
        "stopped at once: what was saved before the first Ctrl-C stays saved",
    ]


def test_off_a_terminal_the_view_says_where_things_stand_with_no_event_coming(capsys, monkeypatch):
    from nspec.progress import ProgressView

    monkeypatch.setattr(ProgressLines, "EVERY", 0.5)  # 10 s in use: a second's wait shows the same here
    with ProgressView(terminal=False) as show:
        show(Event("live-start", "answers", "local", total=3))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "so far" not in capsys.readouterr().err:
            time.sleep(0.1)  # nothing more is shown: the view's own clock says it
        assert time.monotonic() < deadline
