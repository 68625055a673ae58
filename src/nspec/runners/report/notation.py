"""How the report writes a context length, in one notation wherever one appears (the page, its tables and charts,
the headline table's files and `nspec report`'s output): a length chosen in binary thousands (a multiple of 1,024
tokens that is no round thousand) in K, as RULER writes its lengths (4096 is 4K, 131072 128K); any other in full
(1,500; 128,000). An effective length below the shortest length is `<` that length, one at the longest `>` it (the
model may go further than was measured)."""

from __future__ import annotations

from collections.abc import Sequence

# The same in Vega's expression language, for the charts' axes.
VEGA = (
    "datum.value % 1024 == 0 && datum.value % 1000 != 0 ? format(datum.value / 1024, 'd') + 'K' "
    ": format(datum.value, ',')"
)


def length(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens % 1024 == 0 and tokens % 1000 != 0 else f"{tokens:,}"


def effective(value: int | None, lengths: Sequence[int]) -> str:
    """An effective length among the grid's ``lengths``: None when even the shortest fails."""
    if value is None:
        return f"<{length(min(lengths))}"
    return f">{length(value)}" if value == max(lengths) else length(value)
