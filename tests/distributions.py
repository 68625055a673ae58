"""Installing a plugin package: a worked example of examples/ by pip, or a package written in a test the way pip
leaves one (its modules on the path and a dist-info naming its entry points), so that importlib.metadata finds it
as it finds any installed distribution."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

from nspec import scorers
from nspec.compiler.providers import registry as providers
from nspec.compiler.tasks import registry as families

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def pip_install(example: str, target: Path) -> Path:
    """``examples/<example>`` installed by pip into ``target``: its own distribution, built by the test
    environment's setuptools (nothing is downloaded) from a copy beside ``target``: setuptools writes its build
    folders into the source, where the test processes installing the same example at once would meet."""
    source = shutil.copytree(EXAMPLES / example, target.parent / f"{target.name}-{example}")
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target"]
    subprocess.run([*command, str(target), str(source)], check=True, capture_output=True, timeout=300)
    return target


def reload_plugins() -> None:
    """Every registry reads its entry points again."""
    providers.PROVIDERS.reload()
    families.FAMILIES.reload()
    scorers.SCORERS.reload()
    scorers.METRICS.reload()


def install(
    site: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    modules: Mapping[str, str],
    entry_points: Mapping[str, Mapping[str, str]],
) -> None:
    """Install the distribution ``name`` (version 0.1) into ``site``: ``modules`` (module name to source text) and
    ``entry_points`` (group to name to `module:object`), then put ``site`` on the path."""
    normal = name.replace("-", "_")
    info = site / f"{normal}-0.1.dist-info"
    info.mkdir(parents=True)
    for module, text in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(text), encoding="utf-8")
        sys.modules.pop(module, None)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n", encoding="utf-8")
    groups = "".join(
        f"[{group}]\n" + "".join(f"{n} = {value}\n" for n, value in points.items())
        for group, points in entry_points.items()
    )
    (info / "entry_points.txt").write_text(groups, encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    reload_plugins()
