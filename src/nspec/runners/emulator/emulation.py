"""One running emulation's state, shared by the routes and the worker: config, clock, store, responder, the fault
dice, and the counts tests read."""

from __future__ import annotations

import random
from collections import Counter, deque

from nspec.runners.emulator.config import EmulatorConfig
from nspec.runners.emulator.generation import count_tokens
from nspec.runners.emulator.responders import make_responder
from nspec.runners.emulator.state import Clock, Store


class Emulation:
    """Everything the routes share: config, clock, store, responder and the fault dice."""

    def __init__(self, config: EmulatorConfig, state_dir: str | None = None) -> None:
        self.config = config
        self.clock = Clock()
        self.store = Store.open(state_dir)
        self.responder = make_responder(config.responder, config.seed, count_tokens)
        self.rng = random.Random(config.seed)
        self.statuses: Counter[int] = Counter()  # responses served, by HTTP status (for tests and benchmarks)
        self.answered: Counter[str] = Counter()  # live answers given, per provider (a call made twice counts twice)
        # Requests being handled now: a client that went away leaves its request to finish (a test waits for 0).
        self.handling = 0
        # The latest requests' method, path, query and headers (for tests of what a client sends).
        self.seen: deque[tuple[str, str, dict[str, str], dict[str, str]]] = deque(maxlen=200)

    def roll(self, rate: float) -> bool:
        return rate > 0 and self.rng.random() < rate
