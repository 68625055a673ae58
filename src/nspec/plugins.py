"""One registry for every kind of extension: providers, task families, scorers and metrics.

Each kind is an entry-point group. nspec's own providers, families, scorers and metrics register in its
pyproject.toml exactly as a third party's package would in its own, so a plugin is one module and one entry point:

    [project.entry-points."nspec.scorers"]
    edit_distance = "my_package.scoring:EDIT_DISTANCE"

A spec names an extension; it never names code: a spec from someone else's repository runs only what is installed
here. Entry points are loaded on first use, so a plugin that is broken only matters to the specs that name it, and
then as a `PluginError` (exit 2) naming its distribution and its entry point: never a traceback, never a silent
drop. Two distributions that register one name are refused the same way: which of the two would win is not for
nspec to guess.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Generic, TypeVar

from nspec.errors import UserError

T = TypeVar("T")


class PluginError(UserError):
    """An installed extension that cannot be used: it fails to import, is not of its kind, or shares its name with
    another distribution's."""


def where(point: metadata.EntryPoint) -> str:
    """An entry point as its author wrote it, with the distribution that declares it."""
    dist = point.dist
    owner = f"{dist.metadata['Name']} {dist.version}" if dist is not None else "an unnamed distribution"
    return f"entry point `{point.name} = {point.value}` of {owner}"


@dataclass
class Registry(Generic[T]):
    """The extensions of one kind: entry points of ``group``, each loading an object that ``check`` accepts.

    ``check`` says why a loaded object is not a valid ``kind`` (None when it is): a missing member, an option schema
    that is not a JSON Schema. ``hints`` add a word to the error for a name people often mistype (a word a user may
    mean, not a name)."""

    group: str
    kind: str  # in words, for messages: "provider", "task family", "scorer", "metric"
    plural: str  # "providers", "task families", ...
    check: Callable[[str, Any], str | None] | None = None
    hints: Mapping[str, str] = field(default_factory=dict)
    _points: dict[str, list[metadata.EntryPoint]] | None = field(default=None, init=False, repr=False)
    _loaded: dict[str, T] = field(default_factory=dict, init=False, repr=False)

    def points(self) -> dict[str, list[metadata.EntryPoint]]:
        """Every name of the group, with the entry points that register it (one per distribution, as a rule)."""
        if self._points is None:
            found: dict[str, list[metadata.EntryPoint]] = {}
            for point in metadata.entry_points(group=self.group):
                found.setdefault(point.name, []).append(point)
            self._points = found
        return self._points

    def names(self) -> list[str]:
        """Every registered name, loaded or not."""
        return sorted(self.points())

    def __contains__(self, name: object) -> bool:
        return name in self.points()

    def get(self, name: str) -> T:
        """The extension registered as ``name``, loaded on first use."""
        if name in self._loaded:
            return self._loaded[name]
        points = self.points().get(name)
        if not points:
            known = ", ".join(self.names()) or "none"
            raise PluginError(
                f"unknown {self.kind} {name!r}{self.hints.get(name, '')}: the installed {self.plural} are {known}"
            )
        if len({(p.value, p.dist.metadata["Name"] if p.dist else None) for p in points}) > 1:
            raise PluginError(
                f"two installed distributions register the {self.kind} {name!r}: "
                + " and ".join(where(p) for p in points)
                + "; uninstall one of them (or rename its entry point)"
            )
        point = points[0]
        try:
            loaded: T = point.load()
        except Exception as exc:  # a plugin that cannot load is the plugin's fault, said as such
            raise PluginError(f"the {self.kind} {name!r} ({where(point)}) failed to load: {_said(exc)}") from None
        problem = self.check(name, loaded) if self.check is not None else None
        if problem is not None:
            raise PluginError(f"the {self.kind} {name!r} ({where(point)}) {problem}")
        self._loaded[name] = loaded
        return loaded

    def all(self) -> dict[str, T]:
        """Every extension of the kind, loaded (a listing, the schema for editors): the first that cannot be used
        is an error."""
        return {name: self.get(name) for name in self.names()}

    def reload(self) -> None:
        """Read the entry points again (after installing or removing a package in the same process)."""
        self._points = None
        self._loaded.clear()


def _said(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def named_itself(name: str, loaded: Any) -> str | None:
    """The check every kind makes: an extension's `name` is the name it is registered under."""
    own = getattr(loaded, "name", None)
    if own != name:
        return f"calls itself {own!r}" if isinstance(own, str) else "has no `name`"
    return None
