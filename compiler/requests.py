"""Request lines as bytes: one JSONL line, byte-for-byte stable, whatever provider wrote the line (each provider
builds its own lines: `nspec.providers.Provider.request_line`)."""

from __future__ import annotations

import json
from typing import Any


def encode_line(line: dict[str, Any]) -> bytes:
    """One JSONL line, byte-for-byte stable."""
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
