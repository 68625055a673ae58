"""Built-in value lists for needle variables (``vars: {x: {choice: cities}}``): one value per line in ``NAME.txt``."""

import functools
from importlib import resources


def names() -> list[str]:
    """The names of the built-in lists, sorted."""
    return sorted(p.name[:-4] for p in resources.files(__name__).iterdir() if p.name.endswith(".txt"))


@functools.cache
def load(name: str) -> tuple[str, ...]:
    """The values of the built-in list ``name``, in file order."""
    text = resources.files(__name__).joinpath(f"{name}.txt").read_text(encoding="utf-8")
    return tuple(line for line in text.splitlines() if line)
