"""The package's layers (docs/architecture.md), read from the source: every import — at the top of a module, inside a
function, or under TYPE_CHECKING — goes down a layer or stays in its own, and no two of the package's rooms
(core, compiler, spec, runners, top) import each other."""

from __future__ import annotations

import ast
import functools
import itertools
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

# Lowest first. A module belongs to the layer of its longest matching prefix; the rest of nspec.* is core.
LAYERS = ("core", "compiler", "spec", "runners", "top")
PREFIXES = {
    "nspec.compiler": "compiler",
    "nspec.spec": "spec",
    "nspec.runners": "runners",
    "nspec": "top",  # the facade: re-exports the runners' grader
    "nspec.cli": "top",
    "nspec.__main__": "top",
}


def layer(module: str) -> str:
    if module in PREFIXES:
        return PREFIXES[module]
    for prefix in ("nspec.compiler", "nspec.spec", "nspec.runners"):
        if module.startswith(prefix + "."):
            return PREFIXES[prefix]
    return "core"


def room(module: str) -> str:
    """The top package a module lives in: nspec.compiler, nspec.spec or nspec.runners (their subpackages are rooms
    of theirs, free to import each other's modules), or nspec/ itself, where core and top are two rooms."""
    parts = module.split(".")
    if len(parts) > 1 and f"nspec.{parts[1]}" in PREFIXES and parts[1] in ("compiler", "spec", "runners"):
        return f"nspec.{parts[1]}"
    return f"nspec ({layer(module)})"


def modules() -> tuple[dict[str, Path], set[str]]:
    found: dict[str, Path] = {}
    packages: set[str] = set()
    for path in sorted(SRC.joinpath("nspec").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
            packages.add(".".join(parts))
        found[".".join(parts)] = path
    return found, packages


@functools.cache
def edges() -> list[tuple[str, str, str]]:
    """(importer, imported, file:line) for every import of an nspec module, wherever it is in the file."""
    found, packages = modules()
    out = []
    for module, path in found.items():
        base = module if module in packages else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    target = ".".join([*anchor, node.module] if node.module else anchor)
                else:
                    target = node.module or ""
                # `from nspec.x import y` imports module nspec.x.y where that is one, else names of nspec.x
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in found else target for a in node.names]
            for target in targets:
                if target == "nspec" or target.startswith("nspec."):
                    out.append((module, target, f"{path.relative_to(SRC.parent)}:{node.lineno}"))
    return out


def test_the_edge_script_sees_function_level_and_relative_imports() -> None:
    seen = {(a, b) for a, b, _ in edges()}
    assert ("nspec.cli", "nspec.runners.pipeline") in seen  # imported inside a function
    assert ("nspec.compiler.fit.fill", "nspec.compiler.count_fitting") in seen  # relative
    assert layer("nspec.compiler.tasks.ruler.qa") == "compiler" and layer("nspec.errors") == "core"


def test_no_import_goes_up_a_layer() -> None:
    up = [
        f"{where}: {a} ({layer(a)}) imports {b} ({layer(b)})"
        for a, b, where in edges()
        if LAYERS.index(layer(b)) > LAYERS.index(layer(a))
    ]
    assert not up, "imports that go up a layer:\n" + "\n".join(up)


def test_no_two_packages_import_each_other() -> None:
    between: dict[tuple[str, str], str] = {}
    for a, b, where in edges():
        ra, rb = room(a), room(b)
        if ra != rb:
            between.setdefault((ra, rb), f"{where}: {a} imports {b}")
    graph: dict[str, set[str]] = defaultdict(set)
    for ra, rb in between:
        graph[ra].add(rb)

    def reaches(start: str, goal: str) -> list[str] | None:
        stack, seen = [[start]], {start}
        while stack:
            path = stack.pop()
            for nxt in sorted(graph[path[-1]]):
                if nxt == goal:
                    return [*path, nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append([*path, nxt])
        return None

    cycles = []
    for (ra, rb), where in sorted(between.items()):
        back = reaches(rb, ra)
        if back:
            hops = [between[(x, y)] for x, y in itertools.pairwise(back)]
            cycles.append(f"{ra} -> {rb} ({where}), and back: " + "; ".join(hops))
    assert not cycles, "packages that import each other:\n" + "\n".join(cycles)
