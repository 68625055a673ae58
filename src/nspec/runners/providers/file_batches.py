"""Batch APIs over an uploaded file (OpenAI's, and Together's and Mistral's, made after it): the shard is uploaded, a
batch created on the file, found again after a create whose answer was lost, polled until it ends, its output and
error files downloaded, or cancelled. `FileBatches` takes each step once — every call and the reading of its answer
inside `guard`, every id checked before it is used — and a provider's subclass makes its SDK's calls."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from nspec.compiler.providers.io import BadLine, BatchView, Credentials, Outcome, provider_id
from nspec.errors import NspecError
from nspec.runners.providers import guard, stream_lines

# How far a provider's clock may be behind ours: a batch of the shard is looked for among those created since the
# recorded intent less this many seconds.
CLOCK_SKEW = 300


class FileBatches(ABC):
    """A provider's files and batches (the `BatchClient` interface). A subclass names the endpoints its errors
    name, maps its SDK's exceptions (`_error`), reads its result lines (`parse_line`), and makes its SDK's calls,
    each returning what the SDK returns: the uploaded file (`_upload`), the batch created without the SDK's retries
    (`_create`), the batches listed (`_listed`), a batch (`_get`), a file's content written to disk (`_download`), a
    cancel (`_cancel`); and reads a batch (`_view`, `_failure`)."""

    finds_exactly = True  # by metadata this folder wrote (or, `_made_from`, the file it uploaded)
    files_endpoint = "files"  # the endpoints, as errors name them: uploads
    content_endpoint = "file content"  # downloads
    batches_endpoint = "batches"  # the rest

    def __init__(self, provider: str, creds: Credentials) -> None:
        self.provider, self.creds = provider, creds

    def _call(self, what: str, call: Callable[[], Any], objects: bool = True) -> Any:
        return guard(self.provider, what, partial(self._error, what), call, objects)

    def upload(self, shard: Path) -> str:
        return str(self._call(self.files_endpoint, lambda: provider_id(self._upload(shard).id, "file id")))

    def create(self, file_id: str, shard: Path, metadata: dict[str, str]) -> str:
        with open(shard, "rb") as fh:
            line = json.loads(fh.readline())  # a shard holds one model's lines, all to one endpoint
        # Not retried by the SDK: a create whose answer was lost may have made a batch, which the runner finds again
        # (`find`) instead of paying for a second one.
        created = partial(self._create, file_id, line, metadata)
        return str(self._call(self._refused_as(line), lambda: provider_id(created().id, "batch id"), objects=False))

    def find(self, metadata: dict[str, str], after: float) -> list[tuple[str, float]]:
        """The batches made from this shard (`_made_from`) created after ``after`` (Unix seconds) less `CLOCK_SKEW`,
        with their creation times."""

        def call() -> list[tuple[str, float]]:
            return [
                (provider_id(batch.id, "batch id"), created)
                for batch, created in self._listed(after)
                if created >= after - CLOCK_SKEW and self._made_from(batch, metadata)
            ]

        return list(self._call(self.batches_endpoint, call))

    def poll(self, batch_id: str) -> BatchView:
        view: BatchView = self._call(self.batches_endpoint, lambda: self._view(self._get(batch_id)))
        return view

    def failure(self, batch_id: str) -> str:
        return str(self._call(self.batches_endpoint, lambda: self._failure(self._get(batch_id))))

    def download(self, view: BatchView, folder: Path) -> Iterator[Outcome | BadLine]:
        for file_id in view.output_files:
            yield from stream_lines(partial(self._fetch, file_id), folder, file_id, self.parse_line)

    def _fetch(self, file_id: str, dest: Path) -> None:
        self._call(self.content_endpoint, lambda: self._download(file_id, dest))

    def cancel(self, batch_id: str) -> None:
        self._call(self.batches_endpoint, lambda: self._cancel(batch_id))

    def _refused_as(self, line: Mapping[str, Any]) -> str:
        """What a refusal of the create call of a shard whose first line is ``line`` names: the endpoint, unless the
        provider checks the model then."""
        return self.batches_endpoint

    def _made_from(self, batch: Any, metadata: Mapping[str, str]) -> bool:
        """Whether ``batch`` is one of the shard's: it carries exactly the metadata this folder gives it."""
        said = batch.metadata or {}
        return all(said.get(k) == v for k, v in metadata.items())

    @abstractmethod
    def _error(self, model: str, exc: BaseException) -> NspecError | None:
        """The SDK's exception as nspec's, or None when it is not the SDK's."""

    @abstractmethod
    def parse_line(self, line: Mapping[str, Any]) -> Outcome:
        """A line of the batch's output or error file."""

    @abstractmethod
    def _upload(self, shard: Path) -> Any: ...

    @abstractmethod
    def _create(self, file_id: str, line: Mapping[str, Any], metadata: dict[str, str]) -> Any: ...

    @abstractmethod
    def _listed(self, after: float) -> Iterable[tuple[Any, float]]:
        """The batches that may have been created after ``after`` less `CLOCK_SKEW`, each with its creation time."""

    @abstractmethod
    def _get(self, batch_id: str) -> Any: ...

    @abstractmethod
    def _view(self, batch: Any) -> BatchView: ...

    @abstractmethod
    def _failure(self, batch: Any) -> str:
        """Why the batch failed as a whole."""

    @abstractmethod
    def _download(self, file_id: str, dest: Path) -> None: ...

    @abstractmethod
    def _cancel(self, batch_id: str) -> None: ...


def stream_content(client: Any, file_id: str, dest: Path) -> None:
    """A file's content streamed to ``dest`` by an SDK made with Stainless (openai's, together's): a result file of
    hundreds of megabytes is never held whole."""
    with client.files.with_streaming_response.content(file_id) as response:
        response.stream_to_file(dest)
