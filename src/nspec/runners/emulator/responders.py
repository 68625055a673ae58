"""Responders: what the emulated models answer.

- `oracle` finds, for each question in the prompt, the sentence of the context that shares the most of the
  question's content words, and replies with it (all of them on a tie, as multi-value questions have several); with
  no good match it replies `not_found`. Deterministic, and it can be told to degrade.
- `echo` replies with the end of the last user message.
- `cells` replies from a compiled run's cells.jsonl: a cell's expected answers (the `not_found` reply for a negative
  control), found by its custom_id in a batch and by its last user message in a live call; whatever is not one of
  its cells (a judge's prompt) the oracle answers. Every task family runs end to end offline with it; `degrade:
  {miss_rate}` makes it miss a seeded share of the cells. The default, `oracle`, is the same over the runs it is told
  of (`nspec run --emulator` tells it its own: `learn`), so a rehearsal answers every family right.
- `local` replies with the local engine's model (greedy, within the request's max_tokens): real answers on the
  batch and live paths. It answers as fast as the model runs, seconds per long prompt, while the route waits.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nspec.compiler.judge_prompts import ANSWER_CLOSE, ANSWER_OPEN, NO_ANSWER
from nspec.compiler.providers.contract import message_text
from nspec.errors import UserError
from nspec.runners.emulator.config import Responder as ResponderConfig

_WORD = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
_QUESTION = re.compile(r"[^.!?\n]+\?")
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "of",
        "for",
        "to",
        "in",
        "on",
        "at",
        "by",
        "with",
        "and",
        "or",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "how",
        "many",
        "much",
        "did",
        "does",
        "do",
        "this",
        "that",
        "these",
        "those",
        "it",
        "its",
        "all",
        "there",
        "any",
        "from",
        "as",
        "into",
        "your",
        "you",
        "me",
        "my",
        "our",
        "their",
        "not",
        "no",
        "question",  # prompt scaffolding, not content
        "answer",
    ]
)


JUDGE_REFUSAL = "I'm sorry, but I can't help with grading this answer."


@dataclass(frozen=True)
class Reply:
    text: str
    found: bool
    refused: bool = False  # a refusal (OpenAI puts it in `message.refusal` under structured output)


def _words(text: str) -> set[str]:
    return {w[:5] for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}  # land ~ landed


@dataclass(frozen=True)
class JudgeAsked:
    """What a judge prompt asks to grade: the answer, the answers it accepts (None: none exists, a negative
    control), whether all of them are needed, and the form of the reply it asks for."""

    answer: str
    accepted: list[str] | None
    needs_all: bool
    form: str  # "tokens" (aaa or bbb), "score" (a bare 1-10) or "brackets" (an explanation, then "[[N]]")

    def reply(self, right: bool) -> str:
        if self.form == "tokens":
            return "aaa" if right else "bbb"
        if self.form == "score":
            return "10" if right else "1"
        return f"The answer {'matches' if right else 'misses'} the reference. Rating: [[{10 if right else 1}]]"


def _between(text: str, start: str, end: str) -> str | None:
    _, found, rest = text.partition(start)
    return rest.partition(end)[0] if found and end in rest else None


def judge_asked(prompt: str) -> JudgeAsked | None:
    """The grading a user message asks for, if it is a judge prompt of one of nspec's presets (nspec's,
    needlehaystack's, NIAN's); None for any other message, a spec's own judge prompt included."""
    answer = _between(prompt, ANSWER_OPEN, ANSWER_CLOSE)
    if answer is not None:  # nspec's: every expected answer is needed
        line = next((ln for ln in prompt.splitlines() if ln.startswith("Expected answer:")), "")
        expected = line.removeprefix("Expected answer:").strip()
        accepted = None if expected.startswith("none.") else expected.split(" | ")
        return JudgeAsked(answer, accepted, True, "tokens" if "reply aaa" in prompt else "score")
    answer = _between(prompt, "[The Start of Assistant's Answer]\n", "\n[The End of Assistant's Answer]")
    truth = _between(prompt, "[Ground truth]\n", "\nBegin your evaluation")
    if answer is not None and truth is not None:  # needlehaystack's (LangChain's): the needle is the reference
        return JudgeAsked(answer, None if truth == NO_ANSWER else truth.splitlines(), True, "brackets")
    answer = _between(prompt, "And this is the generated answer to the question:\n\n", "\n\nYou need to determine")
    if answer is not None:  # NIAN's: any good answer will do
        one = _between(prompt, "An example of a good answer to this question is:\n\n", "\n")
        few = _between(prompt, "Examples of good answers to this question are: \n", "\n")
        good = [one] if one is not None else (few or "").strip("'").split("', '")
        return JudgeAsked(answer, None if good == [NO_ANSWER] else good, False, "tokens")
    return None


class Oracle:
    def __init__(self, config: ResponderConfig, seed: int, count_tokens: Any) -> None:
        self.config = config
        self.seed = seed
        self.count_tokens = count_tokens
        self._asked: Counter[tuple[str, str]] = Counter()  # how often each judge prompt was asked, per model

    def answer(
        self, system: str | None, messages: list[dict[str, Any]], key: str, max_tokens: int, model: str = ""
    ) -> Reply:
        users = [message_text(m.get("content")) for m in messages if m.get("role") == "user"]
        if not users:
            return Reply(self.config.not_found, False)
        last = users[-1]
        asked = judge_asked(last)
        if asked is not None:
            verdict = self._judge(last, asked, model)
            return Reply(verdict, True, refused=verdict == JUDGE_REFUSAL)
        # The question sentences of the message's last paragraph, where prompts put the question ("What is X?
        # Answer briefly."); the haystack before it may hold questions of its own (dialogue).
        questions = [q.strip() for q in _QUESTION.findall(last.rstrip().rsplit("\n\n", 1)[-1])]
        if not questions:
            questions = [last.strip().splitlines()[-1]] if last.strip() else []
        context = "\n".join(users)
        degrade = self.config.degrade
        if degrade.miss_rate and _unit(self.seed, key) < degrade.miss_rate:
            return Reply(self.config.not_found, False)
        if degrade.miss_beyond_tokens is not None and self.count_tokens(context) > degrade.miss_beyond_tokens:
            return Reply(self.config.not_found, False)
        found: list[str] = []
        for question in questions:
            for start, sentence in self._best(context, question):
                depth = 100 * start / max(1, len(context))
                if degrade.miss_beyond_depth is not None and depth > degrade.miss_beyond_depth:
                    continue
                if sentence not in found:
                    found.append(sentence)
        if not found:
            return Reply(self.config.not_found, False)
        return Reply(" ".join(found), True)

    def _judge(self, prompt: str, asked: JudgeAsked, model: str) -> str:
        """Grade an answer as a judge prompt of nspec's presets asks: right if it holds the answers the prompt
        accepts (or, when none exists, says it is not there and gives no number), in the prompt's reply form —
        unless the config's judge faults make this judge refuse or reply without a verdict."""
        faults = self.config.judge
        if model in faults.refusing_models:
            return JUDGE_REFUSAL
        key = (model, hashlib.sha256(prompt.encode()).hexdigest())
        self._asked[key] += 1
        if model in faults.unreadable_models or self._asked[key] <= faults.unreadable_first:
            return "The answer seems mostly in line with the expected one."
        answer = asked.answer.strip().lower()
        if asked.accepted is None:
            right = any(
                p in answer for p in ("not found", "unanswerable", "not contain", "cannot find")
            ) and not re.search(r"\d{3,}", answer)
        else:
            found = [a.strip().lower() in answer for a in asked.accepted if a.strip()]
            right = all(found) if asked.needs_all else any(found)
        return asked.reply(right)

    def _best(self, context: str, question: str) -> list[tuple[int, str]]:
        wanted = _words(question)
        if len(wanted) < 2:
            return []
        best, hits = 0.0, []
        for m in _candidates(context, wanted):
            sentence = m.group().strip()
            if not sentence or sentence.endswith("?"):
                continue
            score = len(wanted & _words(sentence)) / len(wanted)
            if score > best + 1e-9:
                best, hits = score, [(m.start(), sentence)]
            elif abs(score - best) < 1e-9 and score > 0:
                hits.append((m.start(), sentence))
        return hits[:16] if best >= 0.75 else []


def _candidates(context: str, wanted: set[str]) -> list[re.Match[str]]:
    """The sentences of ``context`` that may hold 0.75 of the ``wanted`` stems (the share that counts), in order. A
    stem is in the lowered text wherever a word with it is, so a sentence whose text holds too few is passed over
    without being split into words: most of a haystack. Found with one search per stem, not one per sentence."""
    sentences = list(_SENTENCE.finditer(context))
    lowered = context.lower()
    if len(lowered) != len(context):  # a letter whose lower case is longer: offsets differ, every sentence is checked
        return sentences
    starts = [m.start() for m in sentences]
    holding: Counter[int] = Counter()
    for stem in wanted:
        found = set()
        at = lowered.find(stem)
        while at >= 0:
            found.add(bisect.bisect_right(starts, at) - 1)
            at = lowered.find(stem, at + 1)
        holding.update(found)
    enough = 0.75 * len(wanted) - 1e-9
    return [sentences[i] for i in sorted(holding) if i >= 0 and holding[i] >= enough]


class Echo:
    def answer(
        self, system: str | None, messages: list[dict[str, Any]], key: str, max_tokens: int, model: str = ""
    ) -> Reply:
        users = [message_text(m.get("content")) for m in messages if m.get("role") == "user"]
        return Reply(users[-1][-200:] if users else "", True)


class LocalModel:
    def __init__(self, model: str) -> None:
        from nspec.runners.providers.local import model_file

        model_file(model)  # a missing package is reported when the emulator starts, not at the first request
        self.model = model

    def answer(
        self, system: str | None, messages: list[dict[str, Any]], key: str, max_tokens: int, model: str = ""
    ) -> Reply:
        from nspec.runners.providers.local import EngineError, engine

        turns = ([{"role": "system", "content": system}] if system else []) + messages
        body = {"model": self.model, "messages": turns, "temperature": 0, "max_tokens": max_tokens}
        try:
            completion = engine(self.model).complete(body, key)
        except EngineError as exc:
            return Reply(f"[local engine: {exc.message}]", False)
        return Reply(completion["choices"][0]["message"]["content"], True)


class Recorded:
    """The answers compiled runs expect (their cells.jsonl), by request id or by the request's last user message;
    the oracle's for anything else."""

    def __init__(self, config: ResponderConfig, oracle: Oracle, runs: list[str]) -> None:
        self.config = config
        self.oracle = oracle
        self._runs = list(runs)  # the runs not read yet
        self._answers: dict[str, str] = {}  # cell id → reply
        self._by_prompt: dict[str, str] = {}  # digest of a request's last user message → cell id
        self._lock = threading.Lock()  # the routes and the batch worker answer from it at once

    def learn(self, run: str) -> None:
        """Answer the cells of the run directory ``run`` too (read at the next request)."""
        self._runs.append(run)

    def answer(
        self, system: str | None, messages: list[dict[str, Any]], key: str, max_tokens: int, model: str = ""
    ) -> Reply:
        answers = self._load()
        cid = key.removeprefix("batch:") if key.startswith("batch:") else None
        if cid not in answers:
            users = [message_text(m.get("content")) for m in messages if m.get("role") == "user"]
            cid = self._by_prompt.get(_digest(users[-1])) if users else None
        if cid is None or cid not in answers:
            return self.oracle.answer(system, messages, key, max_tokens, model)
        miss = self.config.degrade.miss_rate
        if miss and _unit(self.oracle.seed, cid) < miss:  # drawn per cell, so a batch and a live call agree
            return Reply(self.config.not_found, False)
        return Reply(answers[cid], answers[cid] != self.config.not_found)

    def _load(self) -> dict[str, str]:
        """Read the cells and request files of the runs not read yet, at the first request after each is told."""
        with self._lock:
            while self._runs:
                self._read(Path(self._runs.pop(0)))
        return self._answers

    def _read(self, run: Path) -> None:
        if not (run / "cells.jsonl").is_file():
            raise UserError(f"the cells responder reads a compiled run directory; {run} has no cells.jsonl")
        answers = self._answers
        shards: set[str] = set()
        with open(run / "cells.jsonl", encoding="utf-8") as fh:
            for line in fh:
                cell = json.loads(line)
                expected = cell["expected"]
                negative = cell["negative"] or not expected
                answers[cell["cell_id"]] = self.config.not_found if negative else ", ".join(expected)
                shards.add(cell["shard"])
        for shard in sorted(shards):
            with open(run / shard, encoding="utf-8") as fh:
                for line in fh:
                    request = json.loads(line)
                    text = _last_user(request)
                    if text is not None:
                        self._by_prompt[_digest(text)] = str(request.get("custom_id", request.get("key")))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _last_user(line: Mapping[str, Any]) -> str | None:
    """The last user message of a request line, in any provider's format (OpenAI's chat or Responses, Anthropic's,
    Gemini's, Mistral's, Together's)."""
    body = line.get("body") or line.get("params") or line.get("request") or {}
    messages = body.get("messages") or body.get("input") or body.get("contents")
    if not isinstance(messages, list):
        return None
    users = [m for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
    return message_text(users[-1].get("content", users[-1].get("parts"))) if users else None


Responder = Oracle | Echo | LocalModel | Recorded


def _unit(seed: int, key: str) -> float:
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def make_responder(config: ResponderConfig, seed: int, count_tokens: Any) -> Responder:
    if config.kind == "oracle":
        return Recorded(config, Oracle(config, seed, count_tokens), [])
    if config.kind == "cells":
        if not config.run:
            raise UserError("the cells responder needs the run directory it answers from (responder.run, or --answers)")
        return Recorded(config, Oracle(config, seed, count_tokens), [config.run])
    if config.kind == "echo":
        return Echo()
    if config.kind == "local":
        return LocalModel(config.model)
    raise UserError(f"unknown responder {config.kind!r}; choose oracle, echo, cells or local")
