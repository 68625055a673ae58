"""The emulator's worker: between polls it looks at every batch not ended, as a service works on its batches whether
or not anyone asks, so a poll finds the work done instead of doing it (each look answers for at most
the timing's `look_seconds`, holding the store's lock that long at most)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from nspec.runners.emulator import (
    anthropic_batches,
    body_batches,
    google_batches,
    mistral_batches,
    openai_batches,
    together_batches,
)
from nspec.runners.emulator.emulation import Emulation

INTERVAL_SECONDS = 0.2  # between rounds of looks


def look_at_all(emu: Emulation) -> None:
    """One look at every batch not ended yet."""
    store, config, responder, now = emu.store, emu.config, emu.responder, emu.clock.now()
    looks: list[tuple[dict[str, dict[str, Any]], Callable[[dict[str, Any]], object]]] = [
        (store.openai_batches, lambda b: openai_batches.status(store, b, config, now, responder)),
        (store.anthropic_batches, lambda b: anthropic_batches.advance(store, b, config, now, responder)),
        (store.google_batches, lambda b: google_batches.operation(store, b, config, now, responder)),
        (
            store.mistral_batches,
            lambda b: body_batches.progress(store, mistral_batches.KIND, b, config, now, responder),
        ),
        (
            store.together_batches,
            lambda b: body_batches.progress(store, together_batches.KIND, b, config, now, responder),
        ),
    ]
    for table, look in looks:
        for batch in list(table.values()):
            if batch["final"] is None:
                look(batch)


class Worker:
    """Looks at the batches every `INTERVAL_SECONDS` until stopped."""

    def __init__(self, emu: Emulation) -> None:
        self.emu = emu
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nspec-emulator-worker", daemon=True)
        self._said: set[str] = set()  # errors reported already (the same one recurs every round)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_SECONDS):
            try:
                look_at_all(self.emu)
            except Exception as exc:  # the poll that looks next meets the same error and answers 500 with it
                message = f"nspec emulator: a batch could not be advanced: {type(exc).__name__}: {exc}"
                if message not in self._said:
                    self._said.add(message)
                    print(message, file=sys.stderr, flush=True)
