"""Where a spec file comes from in version control, so results trace back to a versioned spec."""

from __future__ import annotations

import os
import subprocess


def git_state(path: str) -> dict[str, object] | None:
    """The commit of the repository holding ``path`` and whether the file differs from it; None outside git."""
    folder = os.path.dirname(os.path.abspath(path))

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--", os.path.basename(path))
    return {"commit": commit, "dirty": bool(status)}
