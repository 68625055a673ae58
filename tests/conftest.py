from __future__ import annotations

import contextlib
import fcntl
import os
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from nspec.cli import main
from nspec.errors import UserError
from nspec.runners.emulator import Emulator, EmulatorConfig
from nspec.runners.emulator.config import Timing
from nspec.runners.providers import SDK_RETRIES_ENV
from nspec.runners.providers.local import EMBEDDED_MODEL, model_file
from nspec.runners.report.page import vega_bundle
from tests import standins

# Property tests draw the same examples on every run and machine (from each test's name): a fresh clone's CI meets
# what a developer's run met, and a failure found once is found again.
settings.register_profile("nspec", derandomize=True, database=None)
settings.load_profile("nspec")

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"


def shipped_specs() -> list[Path]:
    """The example specs: every one loads in the tests, the data sets they name served by stand-ins
    (`tests.standins`, installed in the session's cache by `local_cache`)."""
    return sorted(SPECS.glob("*.yaml"))


# Shipped grids too large to plan or compile whole in the default run (RULER's 78,000 cells up to 128K, NIAN's 300 at
# up to 120K): taken at their shortest length, one trial; their families are tested whole in their own files.
LARGE_SPECS = ("ruler.yaml", "nian.yaml")


def shipped_grid(name: str, spec: dict) -> dict:
    """A shipped spec's resolved form as the default run compiles it: a large grid (`LARGE_SPECS`) cut down."""
    if name in LARGE_SPECS:
        grid = spec["grid"]
        grid.update(context_lengths=[min(grid["context_lengths"])], trials=1)
    return spec


# A minimal valid spec; tests change one thing at a time.
BASE = """\
nspec: 1
name: t
haystack: {corpus: austen}
needles:
  - text: "The number is {n}."
    question: "What is the number?"
    answer: "{n}"
    vars: {n: {digits: 7}}
grid: {context_lengths: [1000], depths: [50]}
prompt: {user: "{haystack} {question}"}
models: [{id: openai/gpt-4.1-mini}]
"""


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist, each worker keeps to its share of the cores, and so do the processes it starts. The local
    engine runs a thread per core, and its threads wait for each other after every step: on cores that another
    worker keeps busy, its requests took two to three times as long and spent the other worker's time waiting."""
    worker = getattr(config, "workerinput", None)
    if worker is None or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    index, count = int(worker["workerid"].removeprefix("gw")), int(worker["workercount"])
    # More workers than cores (they spend much of their time waiting on servers and subprocesses): share them out.
    os.sched_setaffinity(0, cores[index::count] if len(cores) >= count else [cores[index % len(cores)]])


class CliResult:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    @property
    def lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliResult]:
    """Run nspec in-process; returns exit code, stdout and stderr."""
    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str, cwd: Path | None = None) -> CliResult:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """Write a spec into a temporary folder (the working directory) and return its relative name."""
    monkeypatch.chdir(tmp_path)

    def write(text: str, name: str = "spec.yaml") -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return os.path.relpath(path, tmp_path)

    return write


@pytest.fixture
def api_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys for the emulator, and no SDK-level retries (so no test sleeps on a retry delay)."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv(SDK_RETRIES_ENV, "0")


@pytest.fixture(autouse=True, scope="session")
def local_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A cache folder of the session's own (subprocesses inherit it) with stand-ins for the data sets nspec fetches
    in it (`tests.standins`), pinned in place of the real ones: the shipped specs that name them (NIAN's files,
    SQuAD, HotpotQA, `corpus: paul-graham`) validate, plan and compile offline, on texts of our own in the same
    formats. Under xdist, each worker's folder also holds the files nspec builds in its cache that no test changes,
    built once for all the workers (`built_once`)."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NSPEC_CACHE_DIR", str(folder))
        standins.install(folder, patch, standins.files())
        if hasattr(request.config, "workerinput"):  # the workers' folders share a parent of this session's own
            built_once(tmp_path_factory.getbasetemp().parent / "built-once", folder)
        yield


def built_once(shared: Path, folder: Path) -> None:
    """The embedded model (assembled and checked: about a second) and the report's script (bundled by vl-convert:
    about 1.5 s), built in ``shared`` by the first worker while the others wait, and linked into ``folder``: each
    worker built both before."""
    shared.mkdir(exist_ok=True)
    with (shared / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("NSPEC_CACHE_DIR", str(shared))
            with contextlib.suppress(UserError):  # no local extra: its tests skip or fail on their own
                model_file(EMBEDDED_MODEL)
            vega_bundle.cache_clear()
            vega_bundle()
            vega_bundle.cache_clear()  # a test that calls it finds its worker's folder
    for path in shared.iterdir():
        if not path.name.startswith("."):
            os.link(path, folder / path.name)


@pytest.fixture
def emulator() -> Iterator[Callable[..., Emulator]]:
    """Start emulators (ports chosen by the OS) with fast lifecycles; all are stopped at the end."""
    running = []

    def start(**sections: object) -> Emulator:
        timing = Timing(validate_seconds=0.2, seconds_per_request=0.02, finalize_seconds=0.2)
        emu = Emulator(EmulatorConfig(**{"timing": timing, **sections})).start()  # type: ignore[arg-type]
        running.append(emu)
        return emu

    yield start
    for emu in running:
        emu.stop()
