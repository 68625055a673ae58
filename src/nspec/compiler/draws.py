"""Seeded random draws that never change: SHA-256 in counter mode, keyed by the spec seed and a cell's identity.

Python's `random` makes no promise that its methods give the same values across versions; compiled files must be
byte-identical for years, so every draw here is defined by this module alone.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


class Draws:
    """A stream of random numbers determined by ``key`` (any JSON-serialisable value)."""

    def __init__(self, *key: Any) -> None:
        self._key = hashlib.sha256(json.dumps(key, separators=(",", ":"), sort_keys=True).encode())
        self._counter = 0

    def _block(self) -> bytes:
        """SHA-256 of the key then the counter (the key's hash state is kept: only the counter is hashed anew)."""
        self._counter += 1
        block = self._key.copy()
        block.update(self._counter.to_bytes(8, "big"))
        return block.digest()

    def below(self, n: int) -> int:
        """A uniform integer in [0, n), by rejection so there is no modulo bias."""
        if n <= 0:
            raise ValueError("n must be positive")
        blocks, shift, limit = _bounds(n)
        while True:
            if blocks == 1:  # the usual case, without a join
                value = int.from_bytes(self._block(), "big") >> shift
            else:
                value = int.from_bytes(b"".join(self._block() for _ in range(blocks)), "big") >> shift
            if value < limit:
                return value % n

    def choice(self, items: Sequence[T]) -> T:
        return items[self.below(len(items))]

    def shuffled(self, items: Sequence[T]) -> list[T]:
        out = list(items)
        for i in range(len(out) - 1, 0, -1):
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out

    def sample(self, items: Sequence[T], k: int) -> list[T]:
        return self.shuffled(items)[:k]

    def uniform(self) -> float:
        """A float in [0, 1) with 53 random bits."""
        return self.below(1 << 53) / (1 << 53)

    def digits(self, n: int) -> str:
        """A number of exactly ``n`` digits, no leading zero."""
        low = 10 ** (n - 1) if n > 1 else 0
        return str(low + self.below(10**n - low))

    def uuid4(self) -> str:
        b = bytearray(self._block()[:16])
        b[6] = (b[6] & 0x0F) | 0x40
        b[8] = (b[8] & 0x3F) | 0x80
        h = b.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@functools.lru_cache(maxsize=4096)
def _bounds(n: int) -> tuple[int, int, int]:
    """For draws below ``n``: the blocks a draw takes, the bits to drop from them, and the rejection limit."""
    bits = n.bit_length() + 64
    blocks = (bits + 255) // 256
    return blocks, blocks * 256 - bits, (1 << bits) - ((1 << bits) % n)
