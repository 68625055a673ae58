"""The worked provider of CONTRIBUTING.md, `examples/toy-provider`: a third party's provider, added the way
docs/providers.md says (one module and an `nspec.providers` entry point in a distribution of its own, no change to
nspec), installed with pip. Its API is its own, so a spec runs on it end to end against a tiny in-test server of that
API; the error tree, the key check and resumption work for it as for the built-ins."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nspec.compiler.providers import registry as providers
from tests.contract import assert_run_valid
from tests.distributions import pip_install, reload_plugins

# The provider module, as its author would write it: an HTTP API of one endpoint, POST /answer, no batch API.

KEY = "toy-secret"

SPEC = """\
nspec: 1
name: toy-run
seed: 5
haystack: {{corpus: austen}}
needles:
  - text: "The special magic number is: {{n}}."
    question: "What is the special magic number?"
    answer: "{{n}}"
    vars: {{n: {{digits: 7}}}}
grid: {{context_lengths: [400, 800], depths: [10, 90], negative_controls: true}}
prompt: {{user: "{{haystack}}\\n\\n{{question}}", reserve_tokens: 40}}
models:
  - {{id: toy/toy-1, base_url: "{url}", price: {{input: 0.1, output: 0.2}}}}
run: {{retry: {{attempts: 2}}}}
"""


class ToyServer(ThreadingHTTPServer):
    """The toy API: finds the number in the prompt as a perfect model would; refuses a wrong key (401) and an
    unknown model (404) as a real API does."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ToyHandler)
        self.answered = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class ToyHandler(BaseHTTPRequestHandler):
    server: ToyServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("x-toy-key") != KEY:
            return self._send(401, {"error": "invalid key"})
        if self.path != "/answer" or body.get("model") != "toy-1":
            return self._send(404, {"error": f"no model {body.get('model')}"})
        found = re.search(r"number is: (\d+)", body["prompt"])
        answer = f"The special magic number is {found.group(1)}." if found else "The text does not say."
        self.server.answered += 1
        self._send(200, {"answer": answer, "usage": [len(body["prompt"].split()), len(answer.split())]})

    def _send(self, status: int, payload: dict[str, object]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pip_install("toy-provider", tmp_path_factory.mktemp("site"))


@pytest.fixture
def toy_package(installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The toy provider as pip installed it, in a folder of the test's own (a test may break it), on the path."""
    site = tmp_path / "site"
    shutil.copytree(installed, site)
    monkeypatch.syspath_prepend(str(site))
    reload_plugins()
    yield site
    monkeypatch.undo()
    sys.modules.pop("nspec_toy", None)
    reload_plugins()


@pytest.fixture
def toy_server() -> Iterator[ToyServer]:
    server = ToyServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_spec_runs_on_a_provider_added_through_its_entry_point(toy_package, toy_server, tmp_path, cli, monkeypatch):
    assert "toy" in providers.names()
    listed = {row["provider"]: row for row in json.loads(cli("providers", "--json").out)}
    assert listed["toy"]["lanes"] == ["live"] and listed["toy"]["key_variables"] == ["TOY_API_KEY"]
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(url=toy_server.url), encoding="utf-8")
    out = str(tmp_path / "out")

    monkeypatch.delenv("TOY_API_KEY", raising=False)
    missing = cli("run", str(spec), "--wait", "-o", out)
    assert missing.code == 2 and "set TOY_API_KEY" in missing.err  # before anything is sent
    assert toy_server.answered == 0

    monkeypatch.setenv("TOY_API_KEY", "wrong")
    refused = cli("run", str(spec), "--wait", "-o", out)
    assert refused.code == 2, refused.err
    assert "toy answered 401" in refused.err and "TOY_API_KEY" in refused.err
    run = next((tmp_path / "out" / "toy-run").iterdir())
    assert not (run / "answers" / "results.jsonl").is_file() or not (run / "answers" / "results.jsonl").read_text()

    monkeypatch.setenv("TOY_API_KEY", KEY)
    done = cli("run", str(spec), "--wait", "-o", out)
    assert done.code == 0, done.err
    assert f"run directory: {run}" in done.out and "report:" in done.out
    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == toy_server.answered == 6  # 2 lengths x 2 depths, and a negative control per length
    assert all(s["verdict"] == "pass" for s in scores), [s["reason"] for s in scores if s["verdict"] != "pass"]
    lines = [json.loads(line) for shard in (run / "answers" / "requests").iterdir() for line in shard.open()]
    assert all(set(line) == {"custom_id", "body"} and "prompt" in line["body"] for line in lines)  # its own format
    assert_run_valid(run)


def test_a_fresh_process_finds_the_installed_plugin(toy_package, toy_server, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(url=toy_server.url), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(toy_package), os.environ.get("PYTHONPATH", "")])}
    planned = subprocess.run(
        [sys.executable, "-m", "nspec", "plan", str(spec)], capture_output=True, text=True, env=env, check=False
    )
    assert planned.returncode == 0, planned.stderr
    assert "toy/toy-1" in planned.stdout and "live" in planned.stdout
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")  # uninstalled: the spec names a provider nspec lacks
    unknown = subprocess.run(
        [sys.executable, "-m", "nspec", "plan", str(spec)], capture_output=True, text=True, env=env, check=False
    )
    assert unknown.returncode == 2 and "unknown provider 'toy'" in unknown.stderr


def test_a_plugin_that_fails_to_load_is_named(toy_package, cli, spec_file):
    (toy_package / "nspec_toy.py").write_text("raise ImportError('no module named toy_sdk')\n", encoding="utf-8")
    sys.modules.pop("nspec_toy", None)
    reload_plugins()
    path = spec_file(
        "nspec: 1\nname: t\nhaystack: {corpus: austen}\nneedles: [{text: a, question: b, answer: c}]\n"
        "grid: {context_lengths: [500]}\nprompt: {user: '{haystack} {question}'}\n"
        "models: [{id: toy/toy-1}]\n"
    )
    result = cli("validate", path)
    assert result.code == 2
    assert (
        "models[0].id: the provider 'toy' (entry point `toy = nspec_toy:PROVIDER` of nspec-toy 0.1) failed to load: "
        "ImportError: no module named toy_sdk" in result.err
    )
    listed = cli("providers", "--json")  # the others are listed as usual, the broken one with its error
    rows = {row["provider"]: row for row in json.loads(listed.out)}
    assert listed.code == 0 and "ImportError: no module named toy_sdk" in rows["toy"]["error"] and "anthropic" in rows
