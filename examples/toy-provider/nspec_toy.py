"""A provider of one's own for needlespec: `toy`, an HTTP API of one endpoint and no batch API.

    POST {base_url}/answer  {"model", "prompt", "max_tokens"}  ->  {"answer", "usage": [input, output]}

The key goes in the `x-toy-key` header. Model ids are `toy/<model>`; the key is read from TOY_API_KEY.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from nspec.compiler.providers.contract import model_name
from nspec.compiler.providers.io import Credentials, Outcome, ShardLimits
from nspec.errors import UserError
from nspec.prompt import Prompt
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

    def request_line(
        self,
        entry: Mapping[str, Any],
        custom_id: str,
        prompt: Prompt,
        params: Mapping[str, Any],
        max_tokens: int,
    ) -> dict[str, Any]:
        text = "\n\n".join(prompt.texts())
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
