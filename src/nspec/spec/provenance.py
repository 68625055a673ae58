"""Where a compile's inputs come from: every file it read (the spec, its includes, haystack files, stack files) with
its SHA-256 and, where it lies in a git work tree, the commit and whether the file differs from it — so a result
traces back to every byte that made it. Built-in corpora are nspec's own (the manifest hashes them per file)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from typing import Any

from nspec.compiler.haystack import haystack_paths
from nspec.compiler.tasks import registry
from nspec.datasets import path_of
from nspec.spec import LoadedSpec
from nspec.spec.loader import counts_file


def input_files(loaded: LoadedSpec) -> list[tuple[str, str]]:
    """(path, role) of every file a compile of ``loaded`` reads, roles: spec, include, haystack, stack, counts."""
    files = [(loaded.files[0], "spec"), *((f, "include") for f in loaded.files[1:])]
    haystack = loaded.data.get("haystack", {})  # a task family that generates its contexts reads none
    if "files" in haystack:
        files += [(p, "haystack") for p in haystack_paths(haystack, loaded.base_dir, loaded.confinement)]
    files += [(path, "data") for path in family_data_files(loaded.data, loaded.base_dir)]
    if "stack" in haystack:
        files += [(path_of(haystack["stack"][k], loaded.base_dir), "stack") for k in ("items", "questions")]
    if loaded.counts is not None:
        files.append((counts_file(loaded.file), "counts"))
    return [(os.path.normpath(path), role) for path, role in files]


def family_data_files(spec: dict[str, Any], base_dir: str) -> list[str]:
    """The data files the spec's task family reads (`Family.data_files`)."""
    family = registry.family(registry.named(spec))
    points = [{**registry.params_of(spec), **point} for point in registry.points(spec)]
    return list(family.data_files(points, base_dir))


def describe(loaded: LoadedSpec) -> dict[str, Any]:
    """The provenance recorded in the manifest: the spec file, every input file, and overall git state (the
    commit of the spec's repository; dirty if any input differs from its commit or is not committed at all)."""
    entries = []
    repos: dict[str, tuple[str, set[str]] | None] = {}
    for path, role in input_files(loaded):
        entry: dict[str, Any] = {"path": path, "role": role, "sha256": _sha256(path), "git": None}
        root = _toplevel(os.path.dirname(os.path.abspath(path)))
        if root is not None:
            if root not in repos:
                repos[root] = _repository(root, [p for p, _ in input_files(loaded)])
            state = repos[root]
            if state is not None:
                commit, dirty = state
                entry["git"] = {"commit": commit, "dirty": os.path.realpath(path) in dirty}
        entries.append(entry)
    spec_git = entries[0]["git"]
    git = None
    if spec_git is not None:
        git = {"commit": spec_git["commit"], "dirty": any(e["git"] is None or e["git"]["dirty"] for e in entries)}
    return {"spec": loaded.file, "files": entries, "git": git}


def summary(provenance: dict[str, Any]) -> str:
    """One line: how many inputs, at which commit, and which differ from it."""
    files = provenance["files"]
    roles = [f["role"] for f in files]
    kinds = ("spec", "include", "haystack", "stack", "data", "counts")
    counted = ", ".join(f"{roles.count(r)} {r}" for r in kinds if r in roles)
    git = provenance["git"]
    if git is None:
        return f"inputs: {counted} (not in a git work tree)"
    changed = [f["path"] for f in files if f["git"] is None or f["git"]["dirty"]]
    state = "clean" if not changed else "dirty: " + ", ".join(changed[:5]) + (" ..." if len(changed) > 5 else "")
    return f"inputs: {counted} at git {git['commit'][:12]}, {state}"


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _git(folder: str, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _toplevel(folder: str) -> str | None:
    out = _git(folder, "rev-parse", "--show-toplevel")
    return os.path.realpath(out.strip()) if out else None


def _repository(root: str, paths: list[str]) -> tuple[str, set[str]] | None:
    """The commit of the repository at ``root`` and which of ``paths`` in it differ from that commit: modified,
    staged, untracked or ignored (a file git does not have cannot be traced to the commit). One git call each."""
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return None  # a repository with no commit yet
    inside = [os.path.relpath(os.path.realpath(p), root) for p in paths]
    inside = [p for p in inside if not p.startswith("..")]
    status = _git(root, "status", "--porcelain", "-z", "--ignored", "--untracked-files=all", "--", *inside) or ""
    dirty = set()
    for record in status.split("\0"):
        if len(record) > 3:
            dirty.add(os.path.realpath(os.path.join(root, record[3:])))
    return commit.strip(), dirty
