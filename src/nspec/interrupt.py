"""The user's request to stop (Ctrl-C), for the work that stops cleanly at it: live and local sends stop sending and
drop the requests in flight (they are asked again by the next run), waits for batches stop waiting, and each raises
`Interrupted` once what came back is recorded. The CLI asks for it (its SIGINT handler); work that does not look at it
is stopped by `KeyboardInterrupt` as ever."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from nspec.errors import NspecError

_requested = threading.Event()
_watching = 0  # sections under way that look at the request (`watching`)
_lock = threading.Lock()


class Interrupted(NspecError):
    """The work stopped at the user's request; what it had recorded stays (the message says what, and how to go on)."""

    exit_code = 130


def request() -> None:
    _requested.set()


def requested() -> bool:
    return _requested.is_set()


def clear() -> None:
    _requested.clear()


def watched() -> bool:
    """Whether some work under way looks at the request (else Ctrl-C must stop it the ordinary way)."""
    return _watching > 0


@contextmanager
def watching() -> Iterator[None]:
    """While inside, the caller looks at `requested` often enough to stop within a second or two."""
    global _watching
    with _lock:
        _watching += 1
    try:
        yield
    finally:
        with _lock:
            _watching -= 1
