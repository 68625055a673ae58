"""A spec's `files:` patterns are walked under its root only: a pattern whose fixed part leads outside (absolute,
`..`, `~`) is refused before anything is listed, folders reached through a symbolic link are not entered (so loops
end), a walk looks at a bounded number of entries, and no message names a path outside the root. Ordinary patterns
match what `glob` matches, in the same order, so compiled runs stay byte-identical."""

from __future__ import annotations

import glob
import inspect
import os
import sys

import pytest

from nspec.compiler.haystack import haystack_paths
from nspec.errors import UserError
from nspec.inputs import Confinement, glob_files
from tests.conftest import BASE

TEXT = "A quiet sentence in a quiet file. " * 60


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A spec folder (the root: no git work tree above it in tmp) with a haystack tree, and a folder beside it."""
    spec_dir = tmp_path / "repo"
    (spec_dir / "hay" / "sub").mkdir(parents=True)
    (spec_dir / "hay" / "a.txt").write_text(TEXT)
    (spec_dir / "hay" / "sub" / "b.txt").write_text(TEXT)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret-name.txt").write_text("The launch code is 0000. " * 60)
    monkeypatch.chdir(spec_dir)
    return spec_dir


def spec_with(root, files: str) -> str:
    (root / "spec.yaml").write_text(BASE.replace("{corpus: austen}", f"{{files: {files}}}"), encoding="utf-8")
    return "spec.yaml"


def confined(root) -> Confinement:
    return Confinement((os.path.realpath(root),))


def test_symlink_loops_do_not_hang_a_recursive_pattern(root, cli):
    os.symlink(".", root / "hay" / "loop")  # two loops: a glob that follows links never ends (or fills the disk
    os.symlink("..", root / "hay" / "sub" / "back")  # cache with ever longer paths)
    (matched,) = glob_files(["**/*.txt"], ".", confined(root))
    assert matched.files == ["./hay/a.txt", "./hay/sub/b.txt"] and matched.refused is None
    result = cli("validate", spec_with(root, "'**/*.txt'"))
    assert result.code == 0, result.err


def test_an_absolute_pattern_outside_the_root_is_refused_before_any_walk(root, cli, monkeypatch):
    def no_walk(*args, **kwargs):
        raise AssertionError("a folder was listed")

    with monkeypatch.context() as patched:
        patched.setattr(os, "scandir", no_walk)
        (matched,) = glob_files(["/**/x.txt"], ".", confined(root))
    assert matched.files == [] and matched.refused is not None
    assert matched.refused.startswith(f"lies outside the spec's root {os.path.realpath(root)}: ")
    result = cli("validate", spec_with(root, "'/**/x.txt'"))
    assert result.code == 2
    assert f"spec.yaml:3:19: haystack.files: '/**/x.txt' lies outside the spec's root {os.path.realpath(root)}: " in (
        result.err
    )
    assert "--allow-path" in result.err


@pytest.mark.parametrize(
    "pattern, reason",
    [
        ("'../elsewhere/*.txt'", "lies outside the spec's root"),
        ("'../*/*.txt'", "lies outside the spec's root"),
        ("'hay/*/../../../elsewhere/*'", "has .. after a wildcard: put every .. before the first wildcard"),
        (
            "'~/hay/*.txt'",
            "has a name starting with ~, which nspec does not expand as a shell does: name the files relative to",
        ),
    ],
    ids=["parent", "parent then wildcard", "dotdot after a wildcard", "tilde"],
)
def test_escaping_patterns_are_refused_and_name_nothing_outside(root, cli, pattern, reason):
    for command in ("validate", "compile"):
        result = cli(command, spec_with(root, pattern))
        assert result.code == 2, result.err
        assert f"spec.yaml:3:19: haystack.files: {pattern} {reason}" in result.err
        assert "secret-name" not in result.err and "launch code" not in result.err


def test_a_pattern_through_an_allowed_folder_is_walked(root, cli, tmp_path):
    spec = spec_with(root, "'../elsewhere/*.txt'")
    assert cli("validate", spec, "--allow-path", str(tmp_path / "elsewhere")).code == 0


def test_folders_reached_through_a_symlink_are_not_walked(root, cli, tmp_path):
    os.symlink(tmp_path / "elsewhere", root / "hay" / "outside")  # a folder outside: never listed
    os.symlink(root / "hay" / "sub", root / "hay" / "again")  # a folder inside: not walked twice
    os.symlink(root / "hay" / "a.txt", root / "hay" / "alias.txt")  # a file inside: read as a file
    (matched,) = glob_files(["hay/**/*.txt"], ".", confined(root))
    assert matched.files == ["./hay/a.txt", "./hay/alias.txt", "./hay/sub/b.txt"]
    assert cli("validate", spec_with(root, "'hay/**/*.txt'")).code == 0
    (every,) = glob_files(["hay/*"], ".", confined(root))
    assert every.files == ["./hay/a.txt", "./hay/alias.txt", "./hay/outside"]  # the link out is listed, to refuse
    assert every.directories == 2  # sub, and the link to it


def test_a_symlink_out_of_the_root_matched_by_a_wildcard_is_refused_without_its_target(root, cli, tmp_path):
    os.symlink(tmp_path / "elsewhere" / "secret-name.txt", root / "hay" / "c.txt")
    result = cli("validate", spec_with(root, "'hay/*.txt'"))
    assert result.code == 2
    assert (
        f"spec.yaml:3:19: haystack.files: hay/c.txt lies outside the spec's root {os.path.realpath(root)} (through a "
        "symbolic link): " in result.err
    )
    assert "elsewhere" not in result.err and "launch code" not in result.err


def test_a_walk_stops_at_its_cap_and_says_so(root, cli, monkeypatch):
    for i in range(30):
        (root / "hay" / f"n{i:02d}.txt").write_text(TEXT)
    (capped,) = glob_files(["hay/*.txt", "hay/sub/*.txt"], ".", confined(root), limit=20)  # the second: not walked
    assert capped.files == [] and capped.refused is not None
    assert capped.refused.startswith("looks at more than 20 folder entries (the most nspec looks at for a haystack's")
    monkeypatch.setattr("nspec.inputs.MAX_GLOB_ENTRIES", 20)
    result = cli("validate", spec_with(root, "['hay/*.txt', 'hay/sub/*.txt']"))
    assert result.code == 2
    assert (
        "spec.yaml:3:20: haystack.files[0]: 'hay/*.txt' looks at more than 20 folder entries (the most nspec looks "
        "at for a haystack's patterns): name the files with a narrower pattern" in result.err
    )
    assert "haystack.files[1]" not in result.err  # not walked, so not said to match nothing
    with pytest.raises(UserError, match=r"haystack.files: 'hay/\*.txt' looks at more than 20 folder entries"):
        haystack_paths({"files": "hay/*.txt"}, ".", confined(root))


def test_a_deep_tree_is_walked_without_recursion(root):
    deep = root / "hay"
    for _ in range(300):
        deep = deep / "d"
        deep.mkdir()
    (deep / "z.txt").write_text(TEXT)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 100)  # less deep than the tree
    try:
        (matched,) = glob_files(["hay/**/z.txt"], ".", confined(root))
    finally:
        sys.setrecursionlimit(limit)
    assert len(matched.files) == 1 and matched.files[0].endswith("/d/z.txt")


@pytest.mark.parametrize("base", ["tree", "tree/", "."])
def test_ordinary_patterns_match_what_glob_matches_in_the_same_order(tmp_path, monkeypatch, base):
    monkeypatch.chdir(tmp_path)
    for name in ("tree/a.txt", "tree/b.md", "tree/.hidden.txt", "tree/x/c.txt", "tree/x/y/d.txt", "tree/.h/e.txt"):
        os.makedirs(os.path.dirname(name), exist_ok=True)
        with open(name, "w") as fh:
            fh.write("text")
    patterns = ["*.txt", "**/*.txt", "**", "x/**", "x//*.txt", "./x/*", "x/*/", ".*", ".h/*", "*/*/*.txt", "[ab].*"]
    patterns += ["x/y/d.txt", "x", "nothing/*", "**/**/*.txt", "x/**/y/*", "a.txt/"]
    for pattern in patterns:
        everything = sorted(set(glob.glob(os.path.join(base, pattern), recursive=True)))
        (matched,) = glob_files([pattern], base, None)
        assert matched.files == [p for p in everything if not os.path.isdir(p)], pattern
        assert (matched.directories > 0) == any(os.path.isdir(p) for p in everything), pattern


def test_a_stack_file_outside_the_root_is_refused_whether_or_not_it_exists(root, cli):
    needles = BASE[BASE.index("needles:") : BASE.index("grid:")]
    for name in ("secret-name.txt", "no-such-file.jsonl"):
        stack = f"{{stack: {{items: ../elsewhere/{name}, questions: ../elsewhere/{name}}}}}"
        (root / "spec.yaml").write_text(BASE.replace("{corpus: austen}", stack).replace(needles, ""))
        result = cli("validate", "spec.yaml")
        assert result.code == 2
        assert f"haystack.stack.items: ../elsewhere/{name} lies outside the spec's root" in result.err
        assert "no such file" not in result.err  # the same answer either way: no oracle
