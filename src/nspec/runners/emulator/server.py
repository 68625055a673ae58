"""Running the emulator: in-process on a port the OS picks (tests), or in the foreground (`nspec emulator`)."""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
from types import TracebackType

import uvicorn

from nspec.errors import NspecError
from nspec.runners.emulator.app import build_app
from nspec.runners.emulator.config import EmulatorConfig
from nspec.runners.emulator.emulation import Emulation
from nspec.runners.emulator.state import Clock
from nspec.runners.emulator.worker import Worker


class Emulator:
    """A running emulator. Use as a context manager; `openai_base_url` and `anthropic_base_url` are for the SDKs."""

    def __init__(
        self, config: EmulatorConfig | None = None, host: str = "127.0.0.1", port: int = 0, state_dir: str | None = None
    ) -> None:
        self.emulation = Emulation(config or EmulatorConfig(), state_dir)
        self.host = host
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self._socket.listen(2048)  # connections made before the server runs wait instead of being refused
        self.port = self._socket.getsockname()[1]
        self._server = uvicorn.Server(
            uvicorn.Config(build_app(self.emulation), log_level="critical", lifespan="off", access_log=False)
        )
        self._thread: threading.Thread | None = None
        self._worker = Worker(self.emulation)

    @property
    def clock(self) -> Clock:
        """The emulator's clock, for tests that jump in time."""
        return self.emulation.clock

    @property
    def anthropic_base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.anthropic_base_url}/v1"

    @property
    def google_base_url(self) -> str:
        return f"{self.anthropic_base_url}/google"

    @property
    def azure_endpoint(self) -> str:
        """What `AzureOpenAI(azure_endpoint=...)` (and an azure model's `base_url`) takes."""
        return f"{self.anthropic_base_url}/azure"

    @property
    def groq_base_url(self) -> str:
        return f"{self.anthropic_base_url}/groq/openai/v1"

    @property
    def together_base_url(self) -> str:
        return f"{self.anthropic_base_url}/together"

    @property
    def mistral_base_url(self) -> str:
        return f"{self.anthropic_base_url}/mistral"

    def start(self) -> Emulator:
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise NspecError("the emulator did not start")
            time.sleep(0.01)
        self._worker.start()
        return self

    def stop(self) -> None:
        self._worker.stop()
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._socket.close()

    def serve_forever(self) -> None:
        """Run in the foreground until interrupted. uvicorn raises the SIGTERM it caught again once it has shut
        down; handled here, the process exits through Python, so the store's scratch folder is removed."""
        signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
        self._worker.start()
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._worker.stop()
            self._socket.close()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
