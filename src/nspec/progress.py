"""What a person sees while nspec works: the events of a stage (`nspec.events`) rendered on stderr, and Ctrl-C.

- On a terminal, a bar for live and local requests (done/total, rate, time left, cost, and the prompt being read in
  a local request: tokens read, tokens per second, time left) and one for each file downloaded; they redraw several
  times a second, so the clock moves between answers too.
- Elsewhere (CI, `| tee`), a line when a send starts, then one every `ProgressLines.EVERY` seconds whether or not an
  answer came (a local prompt can take a minute), and one when it ends; downloads likewise.
- Ctrl-C: the first asks the work under way to stop (`nspec.interrupt`): what came back is saved and the command says
  how to go on; work that does not listen is stopped as ever (KeyboardInterrupt). A second Ctrl-C quits at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text

from nspec import interrupt
from nspec.events import Event, listening


def stderr() -> Console:
    return Console(stderr=True, soft_wrap=True, highlight=False)


def _say(text: str) -> None:
    stderr().print(text, markup=False)


@dataclass
class Reading:
    """The prompt a local request is reading: how far, since when."""

    model: str
    total: int
    done: int
    since: float  # when its first progress came (the clock's)
    at_start: int  # tokens read then
    at: float = 0.0  # when the last progress came

    def said(self, now: float) -> str:
        if self.done >= self.total:
            return f"{self.model}: prompt read ({self.total:,} tokens), answering"
        rate = (self.done - self.at_start) / (self.at - self.since) if self.at > self.since else 0.0
        eta = max(0.0, (self.total - self.done) / rate - (now - self.at)) if rate > 0 else 0.0
        left = f", about {eta:.0f}s left" if rate > 0 else ""
        pace = f", {rate:,.0f} tokens/s" if rate > 0 else ""
        return f"{self.model}: reading the prompt, {self.done:,}/{self.total:,} tokens{pace}{left}"


def reading(current: Reading | None, event: Event, now: float) -> Reading:
    """The prompt being read, after a `request-progress` event (a new one when the total changes or it restarts)."""
    if current is None or current.total != event.total or event.done < current.done or current.model != event.kind:
        return Reading(event.kind, event.total, event.done, now, event.done, now)
    current.done, current.at = event.done, now
    return current


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


class ProgressLines:
    """Progress where no bar can be drawn (stderr is not a terminal): a line when a send starts, one every `EVERY`
    seconds (`tick`, or an answer coming) with done/total, pace, cost and the prompt being read, one when it ends —
    never one per request; a download's progress every `EVERY` seconds and its end."""

    EVERY = 10.0

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.start = Event("live-start")
        self.started = self.said = 0.0
        self.done, self.cost = 0, 0.0
        self.sending = False
        self.reading: Reading | None = None
        self.download: tuple[Event, float, float] | None = None  # the last event, since, last said
        self.lock = threading.Lock()

    def show(self, event: Event) -> None:
        with self.lock:
            self._show(event, self.clock())

    def _show(self, event: Event, now: float) -> None:
        if event.name == "live-start":
            self.start, self.started, self.said, self.done, self.cost = event, now, now, 0, 0.0
            self.sending, self.reading = True, None
            _say(f"{event.stage}: {event.total:,} {event.kind} requests to send")
        elif event.name == "live-result":
            self.done, self.cost, self.reading = self.done + 1, event.cost_usd, None
            if now - self.said >= self.EVERY and self.done < self.start.total:  # the last is said at the end
                self.say(now, final=False)
        elif event.name == "request-progress":
            self.reading = reading(self.reading, event, now)
        elif event.name == "live-end":
            self.sending = False
            self.say(now, final=True)
        elif event.name == "download":
            self._download(event, now)

    def _download(self, event: Event, now: float) -> None:
        last = self.download
        if last is None or last[0].kind != event.kind:
            self.download = (event, now, now)
            return
        self.download = (event, last[1], last[2])
        if event.total and event.done >= event.total:
            _say(f"{event.kind}: {_mb(event.done)} in {now - last[1]:.0f}s")
            self.download = None
        elif now - last[2] >= self.EVERY:
            self.download = (event, last[1], now)
            _say(self.downloaded(event, now - last[1]))

    @staticmethod
    def downloaded(event: Event, elapsed: float) -> str:
        rate = event.done / elapsed if elapsed > 0 else 0.0
        of = f" of {_mb(event.total)}" if event.total else ""
        left = f", about {(event.total - event.done) / rate:.0f}s left" if rate > 0 and event.total else ""
        return f"{event.kind}: {_mb(event.done)}{of}, {rate / 1e6:,.1f} MB/s{left}"

    def tick(self) -> None:
        """Say where things stand if nothing was said for `EVERY` seconds (called every second by `Progress`)."""
        with self.lock:
            now = self.clock()
            if self.sending and now - self.said >= self.EVERY:
                self.say(now, final=False)
            if self.download is not None and now - self.download[2] >= self.EVERY:
                event, since, _ = self.download
                self.download = (event, since, now)
                _say(self.downloaded(event, now - since))

    def say(self, now: float, final: bool) -> None:
        self.said = now
        elapsed = now - self.started
        pace = "-/s"
        if self.done and elapsed > 0:
            pace = f"{self.done / elapsed:.1f}/s" if self.done >= elapsed else f"{elapsed / self.done:.1f}s each"
        line = (
            f"{self.start.stage}: {self.done:,}/{self.start.total:,} {self.start.kind} requests, {pace}, "
            f"${self.cost:.4f}; " + (f"done in {elapsed:.0f}s" if final else f"{elapsed:.0f}s so far")
        )
        if not final and self.reading is not None:
            line += f"; {self.reading.said(now)}"
        _say(line)


class _Rate(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(f"{task.speed:.1f}/s" if task.speed else "-/s")


class ProgressView:
    """Renders a stage's events: the run directory as soon as it is known, a local model loading, progress of live
    and local requests and of downloads — bars on a terminal, else `ProgressLines` — and each wait for pending
    batches. While inside, it also hears the events announced where no listener is passed (`listening`), and Ctrl-C
    asks the work to stop (the module's doc)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, terminal: bool | None = None) -> None:
        self.clock = clock
        self.terminal = sys.stderr.isatty() if terminal is None else terminal
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.files: dict[str, TaskID] = {}
        self.reading: Reading | None = None
        self.lines = None if self.terminal else ProgressLines(clock)
        self.installed = listening(self.show)
        self.run: str | None = None  # the run directory, once a stage says it
        self.ticking = threading.Event()
        self.previous: Any = None  # the SIGINT handler before ours

    def __enter__(self) -> Callable[[Event], None]:
        self.installed.__enter__()
        interrupt.clear()
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._interrupted)
        if self.lines is not None and self.clock is time.monotonic:
            threading.Thread(target=self._tick, daemon=True, name="nspec-progress").start()
        return self.show

    def _tick(self) -> None:
        while not self.ticking.wait(1.0):
            if self.lines is not None:
                self.lines.tick()

    def _interrupted(self, number: int, frame: FrameType | None) -> None:
        if interrupt.requested():
            _say("stopped at once: what was saved before the first Ctrl-C stays saved")
            os._exit(130)
        interrupt.request()
        _say("stopping: what came back is being saved (Ctrl-C again quits at once)")
        if not interrupt.watched():
            raise KeyboardInterrupt

    def show(self, event: Event) -> None:
        if self.lines is not None:
            self.lines.show(event)
        name = event.name
        if name == "compiled":
            self.run = event.detail
        said = _message(event)
        if said is not None:
            console = self.bar.console if self.bar is not None else stderr()
            console.print(said, markup=False)
        elif name in ("destinations", "compiled"):
            print(("sends to: " if name == "destinations" else "run directory: ") + event.detail, flush=True)
        elif self.terminal:
            self._draw(event)

    def _draw(self, event: Event) -> None:
        name = event.name
        if name == "live-start":
            self._start(
                TextColumn(event.kind),
                BarColumn(),
                MofNCompleteColumn(),
                _Rate(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[cost]}"),
                TextColumn("{task.fields[reading]}"),
            )
            self.task = self._bar().add_task(event.stage, total=event.total, cost="$0", reading="")
        elif name == "live-result" and self.bar is not None and self.task is not None:
            self.reading = None
            self.bar.update(self.task, advance=1, cost=f"${event.cost_usd:.4f}", reading="")
        elif name == "request-progress" and self.bar is not None and self.task is not None:
            self.reading = reading(self.reading, event, self.clock())
            self.bar.update(self.task, reading=self.reading.said(self.clock()))
        elif name == "live-end":
            self._stop()
        elif name == "download":
            if event.kind not in self.files:
                if self.bar is None:
                    self._start(
                        TextColumn("{task.description}"),
                        BarColumn(),
                        DownloadColumn(),
                        TransferSpeedColumn(),
                        TimeRemainingColumn(),
                    )
                self.files[event.kind] = self._bar().add_task(event.kind, total=event.total or None)
            self._bar().update(self.files[event.kind], completed=event.done, total=event.total or None)
        elif name == "counted":
            if self.bar is None:
                self._start(TextColumn("counting"), MofNCompleteColumn(), _Rate(), TextColumn("{task.fields[cost]}"))
                self.task = self._bar().add_task("calibrate", total=None, cost="")
            if self.task is not None:
                self._bar().update(self.task, advance=1, cost=event.detail)

    def _start(self, *columns: ProgressColumn) -> None:
        self._stop()
        self.bar = Progress(*columns, console=Console(stderr=True), transient=True, refresh_per_second=4)
        self.bar.start()

    def _bar(self) -> Progress:
        assert self.bar is not None
        return self.bar

    def _stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar, self.task, self.reading = None, None, None
            self.files = {}

    def __exit__(self, *exc: object) -> None:
        self._stop()
        self.ticking.set()
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        self.installed.__exit__(None, None, None)


# The line each event is said in on stderr, whatever the output; an event not here is drawn, or said elsewhere.
_MESSAGES: dict[str, Callable[[Event], str]] = {
    "lock-wait": lambda e: f"{e.detail} is working in it; waiting",
    "waiting": lambda e: f"{e.pending} requests pending; polling again in {e.delay:.0f}s",
    "failing": lambda e: f"{e.kind}: {e.detail}",
    "rate-wait": lambda e: f"{e.kind}: {e.detail}; waiting {e.delay:.1f}s",
    "restored": lambda e: f"{e.total} results lost from the results file fetched again",
    "count-wait": lambda e: f"{e.detail}; asking again in {e.delay:.1f}s",
    "fetching": lambda e: f"fetching {e.detail}…",
    "loading": lambda e: f"loading {e.detail}…",
    "loaded": lambda e: f"{e.detail} loaded in {e.delay:.1f}s",
}


def _message(event: Event) -> str | None:
    said = _MESSAGES.get(event.name)
    return None if said is None else said(event)
