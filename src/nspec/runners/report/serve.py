"""`nspec view`: the report folder served on 127.0.0.1, so the page can load the cell browser's data files of a run
too big to inline (a browser does not let a page read files beside it from file://). Only that folder is served,
only on this machine."""

from __future__ import annotations

import functools
from collections.abc import Callable
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a page and its data files: nothing worth a line each

    def list_directory(self, path: str | Any) -> None:
        self.send_error(404)  # the page and its files, not a file browser
        return None


def serve(folder: Path, port: int, ready: Callable[[str], None]) -> None:
    """Serve ``folder`` on 127.0.0.1:``port`` (0: a free one) until interrupted; ``ready`` gets the page's URL."""
    handler = functools.partial(_Quiet, directory=str(folder))
    with ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        server.daemon_threads = True
        ready(f"http://127.0.0.1:{server.server_address[1]}/index.html")
        server.serve_forever()
