"""Download benchmark: the peak memory of collecting an OpenAI batch whose output file is large (600 MB by default).

A stand-in for OpenAI's files and batches API, in a process of its own, serves a batch that has ended with an output
file of the given size (the run's own results among lines of other requests, as a shared output could hold), read
from disk as it is sent. The run is compiled and submitted, then `nspec collect` downloads and parses the file in a
process of its own; its peak RSS (max RSS of that process) is printed beside the file's size. nspec streams the file
to disk and parses it a line at a time, so the peak should not grow with the file.

Run: .venv/bin/python bench/download.py [--mb 600]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SPEC = """\
nspec: 1
name: download
seed: 1
haystack: {{corpus: austen, vary: none}}
needles:
  - text: "The number is {{n}}."
    question: "What is the number?"
    answer: "{{n}}"
    vars: {{n: {{digits: 7}}}}
grid: {{context_lengths: [300], depths: [0, 100]}}
prompt: {{user: "{{haystack}}\\n\\n{{question}}", reserve_tokens: 20}}
models:
  - {{id: openai/gpt-4.1-mini, mode: batch, base_url: "{url}"}}
scoring:
  - contains: "{{answer}}"
run: {{poll: {{min_seconds: 0.2, max_seconds: 0.5}}}}
"""


def result_line(custom_id: str, text: str) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320},
    }
    line = {"id": "r", "custom_id": custom_id, "response": {"status_code": 200, "body": body}, "error": None}
    return json.dumps(line).encode() + b"\n"


def serve(folder: str, megabytes: int) -> None:
    """The stand-in, in this process: prints its URL, serves until stdin closes."""
    root = Path(folder)
    output = root / "output.jsonl"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args: object) -> None:
            pass

        def reply(self, data: object) -> None:
            body = json.dumps(data).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def batch(self) -> dict[str, object]:
            now = int(time.time())
            return {
                "id": "batch_1",
                "object": "batch",
                "endpoint": "/v1/chat/completions",
                "input_file_id": "file-in",
                "completion_window": "24h",
                "status": "completed",
                "output_file_id": "file-out",
                "error_file_id": None,
                "created_at": now,
                "metadata": {},
                "request_counts": {"total": 2, "completed": 2, "failed": 0},
            }

        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/v1/files":
                # The run's own request ids, then filler lines up to the size asked for.
                ids = [json.loads(line)["custom_id"] for line in data.split(b"\n") if line.startswith(b'{"custom_id"')]
                with open(output, "wb") as fh:
                    for cid in ids:
                        fh.write(result_line(cid, "The number is 1234567."))
                    filler = result_line("someone-else", "x" * 900)
                    for _ in range(megabytes * 1_000_000 // len(filler)):
                        fh.write(filler)
                self.reply(
                    {
                        "id": "file-in",
                        "object": "file",
                        "bytes": len(data),
                        "created_at": 0,
                        "filename": "in.jsonl",
                        "purpose": "batch",
                        "status": "processed",
                    }
                )
            else:
                self.reply(self.batch())

        def do_GET(self) -> None:
            if self.path.startswith("/v1/files/file-out/content"):
                self.send_response(200)
                self.send_header("content-type", "application/octet-stream")
                self.send_header("content-length", str(output.stat().st_size))
                self.end_headers()
                with open(output, "rb") as fh:
                    shutil.copyfileobj(fh, self.wfile, 1 << 20)
            elif self.path.startswith("/v1/batches?"):
                self.reply({"object": "list", "data": [], "has_more": False})
            else:
                self.reply(self.batch())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True

    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    sys.stdin.read()
    server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=600, help="the output file's size in MB")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.mb)
        return
    with tempfile.TemporaryDirectory() as folder:
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", folder, "--mb", str(args.mb)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            url = server.stdout.readline().strip() if server.stdout else ""
            spec = Path(folder) / "spec.yaml"
            spec.write_text(SPEC.format(url=url))
            env = {**os.environ, "OPENAI_API_KEY": "bench-key"}
            nspec = [sys.executable, "-m", "nspec"]
            compiled = subprocess.run(
                [*nspec, "compile", str(spec), "-o", str(Path(folder) / "out")],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            run = compiled.stdout.strip().splitlines()[-1]
            subprocess.run([*nspec, "submit", run], env=env, capture_output=True, text=True)
            started = time.monotonic()
            collect = subprocess.Popen(
                [*nspec, "collect", run], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
            _, status, usage = os.wait4(collect.pid, 0)
            seconds = time.monotonic() - started
            if os.waitstatus_to_exitcode(status) != 0:
                sys.exit(f"nspec collect failed: {collect.stderr.read() if collect.stderr else ''}")
            size = (Path(folder) / "output.jsonl").stat().st_size / 1e6
            print(
                f"output file: {size:,.0f} MB; nspec collect: {seconds:.1f} s, "
                f"peak RSS {usage.ru_maxrss / 1024:,.0f} MB"
            )
        finally:
            if server.stdin:
                server.stdin.close()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
