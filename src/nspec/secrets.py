"""The secrets nspec sends (API keys, header values read from the environment), kept in this process only so that
every provider message nspec stores or prints can have them cut out: some gateways echo the credentials they
received in their error messages, and those messages end up in results files, reports, the ledger and the terminal.
"""

from __future__ import annotations

import re

# Shorter values are not redacted: a placeholder key such as "x" would garble every message it occurs in, and no
# real key is that short.
_SHORTEST = 8
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
REDACTED = "[redacted]"


def register(value: str) -> None:
    """A value nspec sends to a provider that must never be stored or printed."""
    global _pattern
    if len(value) >= _SHORTEST and value not in _secrets:
        _secrets.add(value)
        # Longest first, so a key that contains another is cut whole.
        _pattern = re.compile("|".join(re.escape(s) for s in sorted(_secrets, key=len, reverse=True)))


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by `REDACTED`."""
    if _pattern is None or not text:
        return text
    return _pattern.sub(REDACTED, text)
