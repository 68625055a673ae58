"""Named points where crash-recovery tests kill the process (NSPEC_FAILPOINT=name sends SIGKILL to itself there).

Without the variable they do nothing; they mark the places where a real crash hurts most."""

from __future__ import annotations

import os
import signal

ENV = "NSPEC_FAILPOINT"


def failpoint(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
