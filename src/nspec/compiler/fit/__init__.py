"""Fitting drafts to their lengths, one module per kind of context: `fill` (a haystack cut to the length, needles
placed), `sized` (a generated context built at the largest size that fits), `fixed` (a prompt brought whole, placed
at the smallest length it fits); `measure` holds the token measures they share. Each gives a `Fitted` per draft,
which `compiler.record` turns into the cell's record and request line."""
