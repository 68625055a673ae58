"""Storage faults while a run writes its directory: a full disk, a read-only file system, a file-size limit. Each
ends in exit 2 naming the file and what to do, with no traceback; once fixed, the same command completes the run
with one result per cell and a ledger that agrees with the results."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nspec.compiler.run_writer import compile_run
from nspec.runners import pipeline
from nspec.spec import load_spec
from tests.test_runners import SPEC, assert_complete

pytestmark = pytest.mark.usefixtures("api_keys")


def compile_live(tmp_path: Path, emu, out: Path) -> Path:
    """A live run of one provider (what the storage faults meet is the run directory's writes, not an API)."""
    models = f'  - {{id: openai/gpt-4.1-mini, mode: live, base_url: "{emu.openai_base_url}"}}'
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(models=models, trials=4, attempts=2, live_below=0))
    loaded = load_spec(str(spec))
    return compile_run(loaded.data, loaded.base_dir, out, {}).path


def nspec(*args: str, file_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if file_limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    env = {**os.environ, "NSPEC_FAILPOINT": ""}
    return subprocess.run(
        [sys.executable, "-m", "nspec", *args], capture_output=True, text=True, env=env, preexec_fn=limit, check=False
    )


def assert_consistent(run: Path) -> None:
    """One result per cell, and the ledger's totals are the results' (nothing lost, nothing counted twice)."""
    got = assert_complete(run)
    models = pipeline.status(run)["stages"][0]["models"]  # what `nspec status --json` prints
    assert sum(m["done"] + m["failed"] for m in models) == len(got)
    assert sum(m["input_tokens"] for m in models) == sum(r["usage"]["input_tokens"] for r in got)


def assert_storage_error(result: subprocess.CompletedProcess[str], run: Path) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert f"cannot write {run}" in result.stderr and "then run the same command again" in result.stderr


def test_a_file_size_limit_mid_run_is_exit_2_and_the_run_resumes(emulator, tmp_path):
    emu = emulator()
    run = compile_live(tmp_path, emu, tmp_path / "out")
    stopped = nspec("submit", str(run), file_limit=24_000)  # room for the ledger's start, not for the whole run
    assert_storage_error(stopped, run)
    assert any(advice in stopped.stderr for advice in ("ulimit -f", "free space"))
    resumed = nspec("submit", str(run))
    assert resumed.returncode == 0, resumed.stderr
    assert_consistent(run)


@contextlib.contextmanager
def tmpfs(tmp_path: Path, size: str) -> Iterator[Path]:
    """A small file system of its own, where the machine lets the tests mount one (root with mount rights)."""
    mount = tmp_path / f"fs-{uuid.uuid4().hex[:8]}"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.decode().strip()}); the file-size test covers the path")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_and_a_read_only_remount_on_a_real_file_system(emulator, tmp_path):
    emu = emulator()
    with tmpfs(tmp_path, "4m") as disk:
        run = compile_live(tmp_path, emu, disk / "out")
        filler = disk / "filler"
        with open(filler, "wb", buffering=0) as fh, contextlib.suppress(OSError):  # fill the disk
            while True:
                fh.write(b"\0" * 4096)
        freed = 0
        while freed < 24_000:  # leave room for the run to start, not to finish
            size = filler.stat().st_size
            os.truncate(filler, size - 4096)
            freed += 4096
        full = nspec("submit", str(run))
        assert_storage_error(full, run)
        assert "free space" in full.stderr or "free some space" in full.stderr
        filler.unlink()
        resumed = nspec("submit", str(run))
        assert resumed.returncode == 0, resumed.stderr
        assert_consistent(run)

        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        try:
            read_only = nspec("collect", str(run))
            assert_storage_error(read_only, run)
            assert "the file system is read-only" in read_only.stderr
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
        again = nspec("collect", str(run))
        assert again.returncode == 0, again.stderr
        assert_consistent(run)
