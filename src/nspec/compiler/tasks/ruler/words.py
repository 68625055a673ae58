"""The `wonderwords` word lists RULER draws its words from (copied in ``wonderwords/``, see its PROVENANCE.md)."""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def wonderwords(name: str) -> tuple[str, ...]:
    """One list (``nounlist``, ``adjectivelist`` or ``verblist``) as wonderwords reads it: a word per line, right-
    stripped."""
    text = resources.files(__package__).joinpath("wonderwords", f"{name}.txt").read_text(encoding="utf-8")
    return tuple(line.rstrip() for line in text.splitlines(keepends=True))


@functools.cache
def common_words_vocabulary() -> tuple[str, ...]:
    """RULER's cwe vocabulary: nouns, adjectives and verbs together, each once, sorted (RULER then shuffles it with a
    fixed seed, which changes nothing a uniform sample of it draws)."""
    return tuple(sorted(set(wonderwords("nounlist") + wonderwords("adjectivelist") + wonderwords("verblist"))))
