"""Sizes, read from the source: no class in nspec over `MAX_CLASS` lines and no function (a method, a nested or an
async one too) over `MAX_FUNCTION`, each measured from its `class` or `def` line to its last."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

SRC = Path(__file__).resolve().parent.parent / "src"
MAX_CLASS = 300
MAX_FUNCTION = 80


Definition = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


class Size(NamedTuple):
    name: str  # qualified: module, then the classes and functions it is defined in
    lines: int
    limit: int
    where: str  # file:line

    @property
    def over(self) -> bool:
        return self.lines > self.limit


def definitions(scope: str, body: list[ast.stmt]) -> Iterator[tuple[str, Definition]]:
    """(qualified name, node) of every class and function in ``body``, however deep: in classes, in functions, and
    in compound statements (`if TYPE_CHECKING:`, `try:`, `with`, ...)."""
    for node in body:
        if isinstance(node, Definition):
            name = f"{scope}.{node.name}"
            yield name, node
            yield from definitions(name, node.body)
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, field, []):
                yield from definitions(scope, [child] if isinstance(child, ast.stmt) else child.body)


def sizes() -> list[Size]:
    found = []
    for path in sorted(SRC.joinpath("nspec").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for name, node in definitions(module, ast.parse(path.read_text("utf-8")).body):
            assert node.end_lineno is not None
            limit = MAX_CLASS if isinstance(node, ast.ClassDef) else MAX_FUNCTION
            where = f"{path.relative_to(SRC.parent)}:{node.lineno}"
            found.append(Size(name, node.end_lineno - node.lineno + 1, limit, where))
    return found


def test_the_walk_finds_methods_nested_async_and_conditional_definitions() -> None:
    source = """
class Outer:
    def method(self):
        def inner():
            pass
    if True:
        async def conditional(self):
            try:
                class Deep:
                    pass
            except Exception:
                def handler():
                    pass
"""
    found = {name: node.end_lineno - node.lineno + 1 for name, node in definitions("m", ast.parse(source).body)}
    assert found == {
        "m.Outer": 12,
        "m.Outer.method": 3,
        "m.Outer.method.inner": 2,
        "m.Outer.conditional": 7,
        "m.Outer.conditional.Deep": 2,
        "m.Outer.conditional.handler": 2,
    }


def test_no_class_or_function_is_too_long() -> None:
    too_long = [f"{s.where}: {s.name} has {s.lines} lines (at most {s.limit})" for s in sizes() if s.over]
    assert not too_long, "too long:\n" + "\n".join(too_long)
