"""A stand-in for OpenAI's and Anthropic's batch and live APIs over real HTTP that does what real services, gateways
and proxies sometimes do: answers with lines that are no results, echoes the key, loses a create's answer, lists a
batch late, sends ids no path should hold, or HTML with status 200. Unlike `nspec emulator`, it is deliberately
small and lets a test decide every byte: `Hostile.respond` sees each call with the answer the service would give
and returns what the test wants sent instead."""

from __future__ import annotations

import email.parser
import email.policy
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Call:
    """One request the server received."""

    method: str
    path: str
    route: str  # the method and the path with its ids left out: "GET /v1/batches/{}"
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    number: int  # how many calls of this route came before, plus one


@dataclass
class Reply:
    status: int = 200
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})
    reset: bool = False  # close the connection without answering
    trickle: float = 0.0  # seconds between two bytes of the body (a gateway that never quite stops sending)

    @classmethod
    def json(cls, data: Any, status: int = 200, **headers: str) -> Reply:
        return cls(status, json.dumps(data).encode(), {"content-type": "application/json", **headers})


RESET = Reply(reset=True)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


class Hostile:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}  # OpenAI's, by id
        self.message_batches: dict[str, dict[str, Any]] = {}  # Anthropic's, by id
        self.results: dict[str, bytes] = {}  # an Anthropic batch's results file, by batch id
        self.calls: list[Call] = []
        self.hidden: set[str] = set()  # batch ids the list calls leave out (listed late)
        self._counts: dict[str, int] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        # What a test changes: the text of each answer, the lines of a finished batch's output, and each reply.
        self.answer: Callable[[str, dict[str, Any]], Any] = lambda custom_id, body: "The number is 42."
        self.output: Callable[[str, list[bytes]], list[bytes]] = lambda batch_id, lines: lines
        self.respond: Callable[[Call, Callable[[], Reply]], Reply] = lambda call, default: default()
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no waiting on delayed ACKs

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                split = urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                query = {k: v[0] for k, v in parse_qs(split.query).items()}
                reply = hostile._handle(self.command, split.path, query, dict(self.headers.items()), body)
                if reply.reset:
                    self.close_connection = True
                    self.connection.close()
                    return
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                if not reply.trickle:
                    self.wfile.write(reply.body)
                    return
                try:
                    for i in range(len(reply.body)):
                        self.wfile.write(reply.body[i : i + 1])
                        self.wfile.flush()
                        time.sleep(reply.trickle)
                except OSError:  # the client gave up
                    self.close_connection = True

            do_GET = do_POST = do_DELETE = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> Hostile:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def count(self, route: str) -> int:
        """How many calls ``route`` ("POST /v1/batches") received."""
        return sum(1 for c in self.calls if c.route == route)

    # -- dispatch ----------------------------------------------------------------------------------------------

    def _handle(self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes) -> Reply:
        route = f"{method} {_template(path)}"
        with self._lock:
            self._counts[route] = self._counts.get(route, 0) + 1
            lowered = {k.lower(): v for k, v in headers.items()}
            call = Call(method, path, route, query, lowered, body, self._counts[route])
            self.calls.append(call)
        return self.respond(call, lambda: self._default(call))

    def _default(self, call: Call) -> Reply:
        parts = call.path.strip("/").split("/")
        with self._lock:
            if call.route == "POST /v1/files":
                return self._upload(call)
            if call.method == "GET" and parts[:2] == ["v1", "files"] and parts[-1] == "content":
                return Reply(200, self.files[parts[2]], {"content-type": "application/octet-stream"})
            if call.route == "POST /v1/batches":
                return Reply.json(self._create_openai(json.loads(call.body)))
            if call.route == "GET /v1/batches":
                listed = [b for b in reversed(self.batches.values()) if b["id"] not in self.hidden]
                return Reply.json({"object": "list", "data": listed, "has_more": False})
            if parts[:2] == ["v1", "batches"] and len(parts) >= 3:
                batch = self.batches[parts[2]]
                if parts[-1] == "cancel":
                    batch["status"] = "cancelled" if batch["status"] != "completed" else batch["status"]
                return Reply.json(batch)
            if call.route == "POST /v1/chat/completions":
                request = json.loads(call.body)
                return Reply.json(_completion(request, self.answer("live", request)))
            if call.route == "POST /v1/messages/batches":
                return Reply.json(self._create_anthropic(json.loads(call.body)))
            if call.route == "GET /v1/messages/batches":
                listed = [b for b in reversed(self.message_batches.values()) if b["id"] not in self.hidden]
                return Reply.json({"data": listed, "has_more": False, "first_id": None, "last_id": None})
            if parts[:3] == ["v1", "messages", "batches"] and len(parts) >= 4:
                if parts[-1] == "results":
                    return Reply(200, self.results[parts[3]], {"content-type": "application/binary"})
                batch = self.message_batches[parts[3]]
                if parts[-1] == "cancel":
                    batch["cancel_initiated_at"] = _iso(time.time())
                return Reply.json(batch)
            if call.route == "POST /v1/messages":
                request = json.loads(call.body)
                return Reply.json(_message(request, self.answer("live", request)))
        return Reply.json({"error": {"message": f"no route {call.route}"}}, 404)

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):04d}"

    def _upload(self, call: Call) -> Reply:
        head = f"Content-Type: {call.headers['content-type']}\r\n\r\n".encode()
        form = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + call.body)
        data = next(
            p.get_payload(decode=True)
            for p in form.iter_parts()
            if p.get_param("name", header="content-disposition") == "file"
        )
        file_id = self._new_id("file-")
        self.files[file_id] = data
        return Reply.json(
            {
                "id": file_id,
                "object": "file",
                "bytes": len(data),
                "created_at": int(time.time()),
                "filename": "shard.jsonl",
                "purpose": "batch",
                "status": "processed",
            }
        )

    def _create_openai(self, body: dict[str, Any]) -> dict[str, Any]:
        batch_id = self._new_id("batch_")
        lines = [json.loads(line) for line in self.files[body["input_file_id"]].splitlines() if line.strip()]
        output = [
            json.dumps(
                {
                    "id": f"batch_req_{n}",
                    "custom_id": line["custom_id"],
                    "error": None,
                    "response": {
                        "status_code": 200,
                        "request_id": f"req_{n}",
                        "body": _completion(line["body"], self.answer(line["custom_id"], line["body"])),
                    },
                }
            ).encode()
            for n, line in enumerate(lines)
        ]
        out_id = self._new_id("file-")
        self.files[out_id] = b"".join(line + b"\n" for line in self.output(batch_id, output))
        now = int(time.time())
        batch = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body["endpoint"],
            "errors": None,
            "input_file_id": body["input_file_id"],
            "completion_window": body["completion_window"],
            "status": "completed",
            "output_file_id": out_id,
            "error_file_id": None,
            "created_at": now,
            "in_progress_at": now,
            "expires_at": now + 86400,
            "finalizing_at": now,
            "completed_at": now,
            "failed_at": None,
            "expired_at": None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {"total": len(lines), "completed": len(lines), "failed": 0},
            "metadata": body.get("metadata"),
        }
        self.batches[batch_id] = batch
        return batch

    def _create_anthropic(self, body: dict[str, Any]) -> dict[str, Any]:
        batch_id = self._new_id("msgbatch_")
        lines = [
            json.dumps(
                {
                    "custom_id": r["custom_id"],
                    "result": {
                        "type": "succeeded",
                        "message": _message(r["params"], self.answer(r["custom_id"], r["params"])),
                    },
                }
            ).encode()
            for r in body["requests"]
        ]
        self.results[batch_id] = b"".join(line + b"\n" for line in self.output(batch_id, lines))
        now = time.time()
        n = len(body["requests"])
        batch = {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "ended",
            "request_counts": {"processing": 0, "succeeded": n, "errored": 0, "canceled": 0, "expired": 0},
            "created_at": _iso(now),
            "ended_at": _iso(now),
            "expires_at": _iso(now + 86400),
            "cancel_initiated_at": None,
            "archived_at": None,
            "results_url": f"{self.url}/v1/messages/batches/{batch_id}/results",
        }
        self.message_batches[batch_id] = batch
        return batch


def _template(path: str) -> str:
    """A route's name with its ids left out: `/v1/batches/batch_1/cancel` → `/v1/batches/{}/cancel`."""
    parts = path.strip("/").split("/")
    named = [
        p if i < 2 or p in ("batches", "cancel", "results", "content", "files", "messages", "completions") else "{}"
        for i, p in enumerate(parts)
    ]
    return "/" + "/".join(named)


def _completion(request: dict[str, Any], content: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": request.get("model", "m"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105},
    }


def _message(params: dict[str, Any], content: Any) -> dict[str, Any]:
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": params.get("model", "m"),
        "content": blocks,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 5},
    }
