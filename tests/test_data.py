"""`nspec data`: the data sets the shipped specs name, fetched into the cache and checked against their pins, each file
on its own, continuing a download that stopped; named by specs as `data:<set>[/<file>]`; `corpus: paul-graham`
fetched on first use. Offline: stand-ins of our own (`tests.standins`), pinned in place of the real files, served by a
local stand-in for `NSPEC_DATA_MIRROR`."""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from nspec import corpora, datasets
from nspec.datasets import Pin
from nspec.events import Event, listening
from tests import standins
from tests.conftest import BASE, SPECS


@dataclass
class Mirror:
    """A local HTTP server sending files by name, honouring ranges; ``cut`` sends only that many bytes of a file once
    (a connection that drops); ``asked`` records each request's path and Range header."""

    files: dict[str, bytes]
    cut: dict[str, int] = field(default_factory=dict)
    asked: list[tuple[str, str | None]] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def mirror(monkeypatch: pytest.MonkeyPatch) -> Iterator[Mirror]:
    served = Mirror({name: data for by_file in standins.files().values() for name, data in by_file.items()})

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = self.path.rsplit("/", 1)[-1]
            served.asked.append((name, self.headers.get("Range")))
            data = served.files.get(name)
            if data is None:
                self.send_error(404)
                return
            start = int(re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "bytes=0-").group(1))
            self.send_response(206 if start else 200)
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            self.wfile.write(data[start : served.cut.pop(name, len(data))])

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    served.url = f"http://127.0.0.1:{server.server_address[1]}/mirror"
    monkeypatch.setenv("NSPEC_DATA_MIRROR", served.url)
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache, the stand-ins pinned (as the session's cache has them)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("NSPEC_CACHE_DIR", str(folder))
    standins.pin_to(monkeypatch, standins.files())
    return folder


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_every_file_has_a_name_of_its_own_and_a_pin_of_its_kind():
    # the catalog as shipped (this process's pins are the stand-ins'), read in a process of its own
    script = "import json; from nspec.datasets import CATALOG; print(json.dumps({n: [[f.name, f.url, f.pin.kind, " \
        "f.pin.digest] for f in d.files] for n, d in CATALOG.items()}))"  # fmt: skip
    shipped = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, check=True).stdout)
    names = [f[0] for files in shipped.values() for f in files]
    assert len(names) == len(set(names))  # a mirror serves them side by side
    for files in shipped.values():
        for _, url, kind, digest in files:
            assert re.fullmatch(f"[0-9a-f]{{{64 if kind == 'sha256' else 40}}}", digest) and url.startswith("http")
    assert [f[2] for f in shipped["squad"]] == ["sha256"]  # TensorFlow Datasets publishes one
    assert {f[2] for f in shipped["nian"]} == {"git-blob"}  # only git's tree at the commit names them
    assert all(datasets.NIAN_COMMIT in f[1] for f in shipped["nian"])


def test_a_git_blob_pin_is_git_s_object_id(tmp_path):
    path = tmp_path / "hello"
    path.write_bytes(b"hello\n")
    assert Pin("git-blob", "").of(path) == "ce013625030ba8dba906f756967f9e9ca394464a"  # git hash-object


def test_fetch_puts_every_data_set_in_the_cache_then_finds_them_there(cli, cache, mirror):
    fetched = cli("data", "fetch")
    assert fetched.code == 0, fetched.err
    for name, by_file in standins.files().items():
        for file_name, data in by_file.items():
            assert (cache / "data" / name / file_name).read_bytes() == data
            assert f"{name}: {file_name}: fetched from {mirror.url}/{file_name}, SHA-256 " in fetched.out
    asked = len(mirror.asked)
    again = cli("data", "fetch", "squad")
    assert again.code == 0 and "squad: dev-v2.0.json: already in the cache" in again.out
    assert len(mirror.asked) == asked  # nothing fetched again
    listed = cli("data", "list", "--json")
    assert {row["name"]: row["state"] for row in json.loads(listed.out)}["data:squad"] == "fetched"
    table = cli("data", "list").out
    assert re.search(r"full_questions\.json +│ fetched +│ +\d+\.\d kB", table) and "0.0 MB" not in table


def test_a_file_that_fails_its_pin_is_not_kept_and_the_good_ones_are(cli, cache, mirror):
    mirror.files["full_questions.json"] = b"[]"
    result = cli("data", "fetch", "nian")
    assert result.code == 2
    assert "error: nian: full_questions.json: " in result.err and "nothing was kept" in result.err
    assert (cache / "data" / "nian" / "limerick_dataset_oedilf_v3.json").is_file()
    assert sorted(p.name for p in (cache / "data" / "nian").iterdir()) == ["limerick_dataset_oedilf_v3.json"]


def test_a_git_blob_pin_is_checked_before_the_file_is_kept(cache, mirror, monkeypatch):
    from nspec.fetching import FetchFailed, fetch

    good = standins.files()["nian"]["full_questions.json"]
    blob = hashlib.sha1(b"blob %d\0" % len(good) + good, usedforsecurity=False).hexdigest()
    nian = datasets.CATALOG["nian"]
    for digest, kept in ((blob, True), ("0" * 40, False)):
        file = replace(nian.files[1], pin=Pin("git-blob", digest))
        if kept:
            assert fetch(nian, file) is True
        else:
            (cache / "data" / "nian" / file.name).unlink()
            with pytest.raises(FetchFailed, match=r"its git blob id is .* not the pinned 0000"):
                fetch(nian, file)
        assert (cache / "data" / "nian" / file.name).is_file() is kept
    assert not list((cache / "data" / "nian").glob("*.part"))


def test_a_download_that_stops_goes_on_from_where_it_stopped(cli, cache, mirror):
    name = "hotpot_dev_distractor_v1.json"
    whole = mirror.files[name]
    mirror.cut[name] = len(whole) // 3
    first = cli("data", "fetch", "hotpotqa")
    assert first.code == 2 and "what came in is kept: the same command continues it" in first.err
    kept = (cache / "data" / "hotpotqa" / f"{name}.part").stat().st_size
    assert 0 < kept <= len(whole) // 3  # what came in, to the last whole chunk read
    assert "partly fetched" in cli("data", "list").out
    second = cli("data", "fetch", "hotpotqa")
    assert second.code == 0, second.err
    assert mirror.asked[-1] == (name, f"bytes={kept}-")
    assert (cache / "data" / "hotpotqa" / name).read_bytes() == whole


def test_progress_is_heard_as_bytes_come_in(cache, mirror):
    from nspec.fetching import fetch

    heard: list[Event] = []
    squad = datasets.CATALOG["squad"]
    with listening(heard.append):
        fetch(squad, squad.files[0])
    assert heard[-1].name == "download" and heard[-1].kind == "squad/dev-v2.0.json"
    assert heard[-1].done == heard[-1].total == squad.files[0].size


def test_an_unknown_data_set_is_refused_naming_the_known_ones(cli, cache):
    result = cli("data", "fetch", "squad2")
    assert result.code == 2 and "no data set 'squad2'; nspec fetches: nian, squad, hotpotqa, paul-graham" in result.err


def test_validate_names_the_command_that_fetches_a_missing_data_set(cli, spec_file, cache):
    spec = spec_file(
        "nspec: 1\nname: q\ntask: {name: ruler, params: {task: qa_1}}\ngrid: {context_lengths: [4096]}\n"
        "models: [{id: openai/gpt-4.1-mini}]\n"
    )
    result = cli("validate", spec)
    assert result.code == 2
    assert "spec.yaml:3:36: task.params.task: data:squad (SQuAD 2.0's dev set, which RULER's qa_1 asks from) is not " \
        "in nspec's cache yet; fetch it with: nspec data fetch squad" in result.err  # fmt: skip
    stack = spec_file(
        BASE.replace("haystack: {corpus: austen}", 'haystack: {stack: {items: "data:nian/x.json", questions: q.json}}')
    )
    refused = cli("validate", stack)
    assert "haystack.stack.items: data:nian/x.json: name one of the data set's files: " in refused.err


def test_from_a_fresh_clone_fetch_then_every_shipped_spec_validates(cli, cache, mirror):
    assert cli("data", "fetch").code == 0
    result = cli("validate", *map(str, sorted(SPECS.glob("*.yaml"))))
    assert result.code == 0, result.err


# -- corpus: paul-graham, fetched on first use ------------------------------------------------------------------------


def test_first_use_of_the_essays_fetches_them_and_says_so(cache, mirror):
    heard: list[Event] = []
    with listening(heard.append):
        assert [name for name, _ in corpora.documents("paul-graham")] == [f"essay{i:02d}.txt" for i in range(6)]
    assert heard[0].name == "fetching" and "Paul Graham's essays: " in heard[0].detail
    asked = len(mirror.asked)
    corpora.documents("paul-graham")  # cached: not fetched again
    assert len(mirror.asked) == asked


def test_offline_validate_says_the_command_and_works_once_cached(cli, spec_file, cache, monkeypatch, tmp_path):
    monkeypatch.setenv("NSPEC_DATA_MIRROR", f"http://127.0.0.1:{_closed_port()}")
    spec = spec_file(BASE.replace("{corpus: austen}", "{corpus: paul-graham}"))
    result = cli("validate", spec)
    assert result.code == 2
    assert result.lines[-2].startswith("spec.yaml:3:20: haystack.corpus: corpus paul-graham: ")
    assert result.lines[-2].endswith("Fetch them where the internet can be reached with: nspec data fetch paul-graham")
    standins.install(cache, monkeypatch, {"paul-graham": standins.files()["paul-graham"]})
    assert cli("validate", spec).code == 0
