"""A gateway before `nspec emulator` over real HTTP: it forwards every call as it came (bodies whole, by length or
in chunks) and passes the answer back, except the calls whose path ends with one it blocks, which it answers itself
with an HTML page and the status it is given, as a proxy does with a route it does not forward. A `hold` hears the
path of each call it forwards first, and may keep the call there (its own thread) for as long as it likes."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class Gateway:
    def __init__(
        self,
        upstream: str,
        blocked: str | None = None,
        status: int = 404,
        hold: Callable[[str], None] | None = None,
    ) -> None:
        target = urlsplit(upstream)
        self.blocked, self.status, self.hold = blocked, status, hold
        self.answered: list[str] = []  # the paths it answered itself
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("transfer-encoding", "").lower() != "chunked":
                    return self.rfile.read(int(self.headers.get("content-length") or 0))
                data = b""
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    data += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
                return data

            def _send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in _HOP:
                        self.send_header(name, value)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _serve(self) -> None:
                body = self._body()
                path = urlsplit(self.path).path
                if gateway.blocked is not None and path.endswith(gateway.blocked):
                    gateway.answered.append(self.path)
                    page = f"<html><body>{gateway.status}: not served here</body></html>".encode()
                    self._send(gateway.status, [("content-type", "text/html")], page)
                    return
                if gateway.hold is not None:
                    gateway.hold(path)
                upstream_call = http.client.HTTPConnection(target.hostname or "", target.port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                    upstream_call.request(self.command, self.path, body, headers)
                    answer = upstream_call.getresponse()
                    self._send(answer.status, answer.getheaders(), answer.read())
                finally:
                    upstream_call.close()

            do_GET = do_POST = do_PUT = do_DELETE = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Gateway:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
