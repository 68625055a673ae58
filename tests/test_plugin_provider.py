"""A third-party provider, added the way docs/providers.md says: one module and an `nspec.providers` entry point in
its own (temporary) package, no change to nspec. A spec runs on it end to end against a tiny in-test server, and
the error tree, the key check and resumption work for it as for the built-ins."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nspec.compiler.providers import registry as providers
from tests.contract import assert_run_valid

# The provider module, as its author would write it: an HTTP API of one endpoint, POST /answer, no batch API.
TOY_MODULE = '''
"""toy: POST /answer {"model", "prompt", "max_tokens"} -> {"answer", "usage": [input, output]}; no batch API."""

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from nspec.errors import UserError
from nspec.compiler.providers.io import Credentials, Outcome, ShardLimits
from nspec.compiler.providers.contract import model_name
from nspec.runners.providers import BaseProvider, connection_error, request_failure, status_error


class ToyLive:
    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self.url = (creds.base_url or "http://127.0.0.1:9") + "/answer"

    def _post(self, body: dict[str, Any]) -> tuple[int, bytes, Mapping[str, str]]:
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "x-toy-key": self.creds.api_key},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read(), dict(response.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)

    async def send(self, line: dict[str, Any]) -> tuple[Outcome, Mapping[str, str] | None]:
        body = line["body"]
        try:
            status, data, headers = await asyncio.to_thread(self._post, body)
        except OSError as exc:
            raise connection_error("toy", exc) from None
        if status != 200:
            error = status_error("toy", status, data.decode(), self.creds, body["model"])
            failed = request_failure(line["custom_id"], error)
            if failed is None:
                raise error
            return failed, headers
        reply = json.loads(data)
        return Outcome(line["custom_id"], "ok", reply["answer"], "stop", *reply["usage"]), headers

    async def close(self) -> None:
        pass


class Toy(BaseProvider):
    name = "toy"
    request_format = "toy"
    key_variables = ("TOY_API_KEY",)
    priced = False

    def has_batch(self, entry: Mapping[str, Any]) -> bool:
        return False

    def shard_limits(self, entry: Mapping[str, Any]) -> ShardLimits:
        return ShardLimits(10_000, 1 << 24)

    def request_line(self, entry, custom_id, prompt, params, max_tokens):
        text = "\\n\\n".join(prompt.texts())
        body = {"model": model_name(entry), "prompt": text, "max_tokens": max_tokens, **params}
        return {"custom_id": custom_id, "body": body}

    def request_size(self, line: Mapping[str, Any], count: Callable[[str], int]) -> int:
        return count(line["body"]["prompt"]) + line["body"]["max_tokens"]

    def parse_result(self, line: Mapping[str, Any]) -> Outcome:
        return Outcome(line["custom_id"], "ok", line["answer"], "stop", *line["usage"])

    def batches(self, creds: Credentials) -> Any:
        raise UserError("toy has no batch API")

    def live(self, creds: Credentials, limits: Mapping[str, Any]) -> ToyLive:
        return ToyLive(creds)


PROVIDER = Toy()
'''

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


@pytest.fixture
def toy_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The toy provider installed as a package of its own: its module and a dist-info naming the entry point."""
    site = tmp_path / "site"
    info = site / "nspec_toy-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "nspec_toy.py").write_text(textwrap.dedent(TOY_MODULE), encoding="utf-8")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nspec-toy\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[nspec.providers]\ntoy = nspec_toy:PROVIDER\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    providers.PROVIDERS.reload()
    yield site
    monkeypatch.undo()
    sys.modules.pop("nspec_toy", None)
    providers.PROVIDERS.reload()


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
    providers.PROVIDERS.reload()
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
