"""Draws that stay the same as a sample grows, so that a larger size is the smaller one plus more."""

from __future__ import annotations

import array
import functools
import hashlib
import struct
from collections.abc import Hashable, Sequence

from nspec.compiler.draws import Draws


def distinct_indices(draws: Draws, n: int, k: int) -> list[int]:
    """``k`` distinct indices of ``range(n)``, uniformly: the first ``k`` places of a Fisher-Yates shuffle run from the
    front, in ``k`` draws whatever ``n`` is. The same ``draws`` key and ``n`` give a list whose first ``k`` entries
    are the same for every larger ``k``."""
    return DistinctIndices(draws, n).first(k)


class DistinctIndices:
    """`distinct_indices` of ``draws`` and ``n`` for any ``k``, each index drawn once: a sample built at several
    sizes draws only what its largest size adds."""

    def __init__(self, draws: Draws, n: int) -> None:
        self.draws, self.n = draws, n
        self._drawn: list[int] = []
        self._moved: dict[int, int] = {}  # the places the shuffle has swapped so far; the rest hold their own index

    def first(self, k: int) -> list[int]:
        """The first ``k`` indices."""
        n, drawn, moved, below = self.n, self._drawn, self._moved, self.draws.below
        if not 0 <= k <= n:
            raise ValueError(f"cannot draw {k} distinct indices of {n}")
        for i in range(len(drawn), k):
            j = i + below(n - i)
            drawn.append(moved.get(j, j))
            moved[j] = moved.get(i, i)
        return drawn[:k]


def permutation(draws: Draws, n: int) -> list[int]:
    """A uniform permutation of ``range(n)``: the indices sorted by 64-bit keys read from SHAKE-256 seeded with 256
    bits of ``draws`` (ties, about n²/2⁶⁵ likely, keep index order). One hash call for the whole list, where
    `Draws.shuffled` makes one per element: RULER shuffles lists of 10⁵ words at 128K, once per size tried."""
    seed = draws.below(1 << 256).to_bytes(32, "big")
    keys = struct.unpack(f"<{n}Q", hashlib.shake_256(seed).digest(8 * n))
    return sorted(range(n), key=keys.__getitem__)


@functools.lru_cache(maxsize=64)
def fixed_order(task: str, seed: Hashable, n: int) -> Sequence[int]:
    """The permutation of ``range(n)`` a task uses for every sample of ``n`` items: RULER shuffles with its fixed
    seed, so all samples of a length share an arrangement. Kept, compactly (each trial asks for every length's
    again): a few MB for RULER's lists at 4K to 128K."""
    return array.array("I", permutation(Draws(task, seed, "order", n), n))
