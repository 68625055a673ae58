"""The judge stage: judge prompts compiled into `judge/requests/` in each judge's provider format, run through the
same runners and ledger as the answers, then parsed into votes and combined.

Rubrics: `pass-fail` uses NIAN's verdict tokens — "aaa" passes, "bbb" fails (tokens a correct answer of "No" cannot
be mistaken for); `score-10` is needlehaystack's 1-10 scale, passing at the spec's threshold, or without one a score
only (each vote "scored", the cell's score the panel's mean, as needlehaystack kept it). The prompt that asks
for the verdict (`nspec.compiler.judge_prompts`: nspec's own, a reference's, or the spec's) says how the reply is
read, within its rubric.

A judge's answer budget is the prompt's (a verdict's tokens, or room for the explanation a reference's prompt asks
for first); a judge that reasons is asked to reason least and given room for that reasoning besides
(`nspec.compiler.run_writer.judge_budget`), so its reasoning does not use up the budget.

A reply that errors, refuses, or holds no readable verdict (both tokens, neither, no score) is not a vote: it is
asked again, under a new request id, until the run's retry attempts are used up. Votes combine over the judges that
voted, once a quorum did (default: more than half the panel): `majority` passes only when passes outnumber fails (a
tie fails), `unanimous`, or `any`. Without a quorum the cell has no verdict ("undecided (judge error)").
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nspec import jsonl
from nspec.compiler.judge_prompts import DEFAULT_PRESET, PRESETS, Graded, JudgePrompt, judge_prompt, judge_rubric
from nspec.compiler.models import Model, models_of
from nspec.compiler.run_writer import ShardWriter, effective_mode, judge_budget
from nspec.prompt import Prompt
from nspec.runners.run_store import Run, shard_lines
from nspec.scorers import needle_text

STAGE = "judge"
_REFUSAL = re.compile(r"\b(?:sorry|apologi[sz]e|can't|cannot|unable|won't)\b", re.IGNORECASE)
_SCORE = re.compile(r"(?<!\d)(10|[1-9])(?:\s*/\s*10)?(?!\d)")
# LangChain's rule (ScoreStringResultOutputParser): the first [[...]] holds the score, exactly 1 to 10.
_DOUBLE_BRACKETS = re.compile(r"\[\[(.*?)\]\]")
_BRACKETED_SCORES = [*"123456789", "10"]


@dataclass(frozen=True)
class Grading:
    """How a panel grades: by which rubric, asked by which prompt, passing from which score (score-10; none: the
    panel scores and gives no verdict)."""

    rubric: str
    prompt: JudgePrompt
    threshold: int | None

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> Grading:
        """The grading of a judge entry of the spec (or of the judge stage's manifest, which records the same)."""
        return cls(judge_rubric(settings), judge_prompt(settings.get("prompt")), settings.get("threshold"))

    def key(self, label: str, attempt: int = 1) -> str:
        """A short, stable key of a judge, the rubric and prompt it grades with and the attempt: a request id stays
        the same when the panel around it changes, a new rubric or prompt means new requests, and asking again
        after a reply with no verdict is a new request (results are keyed by request id and never overwritten)."""
        name = f"{label}\0{self.rubric}" + (f"\0{self.prompt.key}" if self.prompt.key else "")
        name += f"\0{attempt}" if attempt > 1 else ""
        return hashlib.sha256(name.encode()).hexdigest()[:6]

    def request(self, model: Model, cell: Mapping[str, Any], answer: str, custom_id: str) -> dict[str, Any]:
        """The request line asking ``model`` to grade ``answer`` to ``cell``'s question."""
        graded = Graded(
            cell["question"],
            list(cell["expected"]),
            list(cell.get("alternates", [])),
            answer,
            cell["negative"],
            needle_text(cell),
        )
        system, user = self.prompt.messages(self.rubric, graded)
        params, budget = judge_budget(model, self.prompt.answer_tokens)
        if self.prompt.structured:
            params = model.api.structured_output(params, "verdict", verdict_schema(self.rubric))
        return model.api.request_line(model.entry, custom_id, Prompt.ask(system, user), params, budget)

    def read(self, text: str) -> Vote:
        return parse_vote(self.rubric, text, self.threshold, self.prompt)


def verdict_schema(rubric: str) -> dict[str, Any]:
    """A verdict as JSON, for providers with structured output: one token or one number, nothing else."""
    if rubric == "pass-fail":
        prop: dict[str, Any] = {"verdict": {"type": "string", "enum": ["aaa", "bbb"]}}
    else:
        prop = {"score": {"type": "integer", "minimum": 1, "maximum": 10}}
    return {"type": "object", "properties": prop, "required": list(prop), "additionalProperties": False}


SCORED = "scored"  # the vote of a score-10 judge without a threshold: a score, no verdict


@dataclass(frozen=True)
class Vote:
    """What one judge's reply says: ``vote`` is "pass", "fail", `SCORED` (a score-10 judge without a threshold), or
    None when the reply holds no verdict."""

    vote: str | None
    detail: str
    score: int | None = None


def parse_vote(rubric: str, text: str, threshold: int | None, prompt: JudgePrompt = PRESETS["nspec"]) -> Vote:
    """A judge's reply as a vote, read as ``prompt`` asks for it: JSON first where it asked for structured output,
    a score from "[[N]]" only where it asked for that (LangChain's rule). A reply with no readable verdict is no
    vote at all (never a fail: a judge's failure says nothing about the answer)."""
    reply = (text or "").strip()
    if prompt.structured and reply.startswith("{"):
        try:
            data = json.loads(reply)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            reply = str(data.get("verdict", data.get("score", reply)))
    if rubric == "pass-fail":
        has_pass, has_fail = "aaa" in reply.lower(), "bbb" in reply.lower()
        if has_pass != has_fail:
            return Vote("pass", "aaa") if has_pass else Vote("fail", "bbb")
        if has_pass:
            return Vote(None, "no verdict: both verdict tokens")
        return Vote(None, "no verdict: the judge refused" if _REFUSAL.search(reply) else "no verdict: no verdict token")
    if prompt.brackets:
        match = _DOUBLE_BRACKETS.search(reply)
        found = match.group(1) if match is not None and match.group(1) in _BRACKETED_SCORES else None
        missing = "no verdict: no [[rating]] of 1-10"
    else:
        match = _SCORE.search(reply)
        found = match.group(1) if match is not None else None
        missing = "no verdict: no score 1-10"
    if found is None:
        return Vote(None, "no verdict: the judge refused" if _REFUSAL.search(reply) else missing)
    score = int(found)
    if threshold is None:
        return Vote(SCORED, f"score {score}", score)
    return Vote("pass" if score >= threshold else "fail", f"score {score}", score)


def quorum(settings: dict[str, Any], panel: int) -> int:
    """Votes needed for a verdict: the spec's `quorum`, or more than half the panel."""
    return int(settings.get("quorum") or panel // 2 + 1)


def combine(votes: list[str], rule: str) -> str:
    passes, fails = votes.count("pass"), votes.count("fail")
    if rule == "unanimous":
        return "pass" if votes and fails == 0 else "fail"
    if rule == "any":
        return "pass" if passes else "fail"
    return "pass" if passes > fails else "fail"


def judge_settings(run: Run) -> dict[str, Any] | None:
    return next((s["judge"] for s in run.spec.get("scoring") or [] if "judge" in s), None)


def judge_id(cell_id: str, key: str) -> str:
    return f"{cell_id}-{key}"  # at most 57 + 7 characters: within custom_id's 64


def compile_judges(run: Run) -> int:
    """Write the judge requests the current scoring needs and no earlier compile wrote (all of them the first
    time; after a rescore, only the new ones; a judge whose reply held no verdict is asked again while the run's retry
    attempts last). Returns how many requests it wrote. Reads scores.jsonl and the answers a line at a time; memory
    holds verdicts and the judged answers, not the run."""
    settings = judge_settings(run)
    if settings is None:
        return 0
    folder = run.path / STAGE
    grading = Grading.of(settings)
    always = settings.get("when", "undecided") == "always"
    verdicts = {score["cell_id"]: score.get("scorer_verdict", score["verdict"]) for score in run.scores()}
    wanted = {cid for cid, v in verdicts.items() if v != "error" and (always or v == "undecided")}
    previous = manifest_of(run) or {"models": [], "cells": []}
    listed = {m["label"]: m for m in previous["models"]}
    done = {cid for m in previous["models"] for s in m["shards"] for cid, _ in shard_lines(run.path / s["file"])}
    models = models_of({"models": settings["models"]})
    attempts, _ = run.retry_policy()
    replies = _replies(run)
    todo: dict[tuple[str, str], int] = {}  # (judge, cell) -> the attempt to ask
    for m in models:
        for cid in wanted:
            attempt = 1
            while judge_id(cid, grading.key(m.label, attempt)) in done:
                reply = replies.get(judge_id(cid, grading.key(m.label, attempt)))
                if reply is None or reply.vote is not None or reply.error or attempt >= attempts:
                    attempt = 0  # asked, and answered (or failed for good, or waiting): nothing to send
                    break
                attempt += 1  # no verdict in the reply: ask again
            if attempt:
                todo[(m.label, cid)] = attempt
    texts = {r["cell_id"]: r.get("text") or "" for r in run.results() if r["cell_id"] in wanted}
    caps = run.spec.get("run", {}).get("shard", {})
    round_name = f"r{1 + max((len(m['shards']) for m in previous['models']), default=0)}"
    (folder / "requests").mkdir(parents=True, exist_ok=True)
    for model in models:
        writer = ShardWriter(run.path, model, caps, stage=STAGE, round_name=round_name)
        for cell in run.cells():
            asking = todo.get((model.label, cell["cell_id"]))
            if asking is None:
                continue
            key = grading.key(model.label, asking)
            request = grading.request(model, cell, texts[cell["cell_id"]], judge_id(cell["cell_id"], key))
            writer.write(jsonl.encode(request))
        writer.close()
        entry = listed.setdefault(
            model.label,
            {
                "label": model.label,
                "id": model.model_id,
                "mode": effective_mode(model),
                "shards": [],
                "entry": model.entry,
            },
        )
        entry["shards"] = entry["shards"] + writer.shards
    manifest = {
        "rubric": grading.rubric,
        "prompt": settings.get("prompt", DEFAULT_PRESET),
        "vote": settings.get("vote", "majority"),
        "threshold": grading.threshold,
        "quorum": quorum(settings, len(models)),
        "attempts": attempts,
        "when": settings.get("when", "undecided"),
        "judges": [m.label for m in models],
        "cells": sorted(wanted),
        "models": list(listed.values()),
    }
    tmp = run.paths.stage_manifest(STAGE).with_suffix(".json.part")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    tmp.replace(run.paths.stage_manifest(STAGE))
    return len(todo)


@dataclass(frozen=True)
class Reply:
    """A judge request's final result, read: its vote, or why it has none."""

    vote: str | None
    detail: str
    text: str
    score: int | None
    error: bool  # the request itself failed (after the runner's retries)


def _replies(run: Run) -> dict[str, Reply]:
    """Every judge result so far by request id, read as the current rubric and prompt ask."""
    manifest = manifest_of(run)
    if manifest is None:
        return {}
    grading = Grading.of(manifest)
    out = {}
    for result in run.results(STAGE):
        text = result.get("text") or ""
        if result["status"] != "ok":
            code = (result.get("error") or {}).get("code")
            out[result["cell_id"]] = Reply(None, f"no verdict: request failed ({code})", text, None, True)
        else:
            vote = grading.read(text)
            out[result["cell_id"]] = Reply(vote.vote, vote.detail, text, vote.score, False)
    return out


def votes(run: Run) -> dict[str, list[dict[str, Any]]]:
    """The current panel's votes per cell, one per judge asked: its latest attempt's vote (pass or fail), or None
    with the reason it has none, and whether more is to come (`pending`: not answered yet, or to be asked again).
    Replies of judges, rubrics or prompts no longer in the spec's scoring stay in the file but are not read."""
    manifest = manifest_of(run)
    if manifest is None:
        return {}
    replies = _replies(run)
    grading = Grading.of(manifest)
    asked = {cid for m in manifest["models"] for s in m["shards"] for cid, _ in shard_lines(run.path / s["file"])}
    attempts = int(manifest.get("attempts", 1))
    out: dict[str, list[dict[str, Any]]] = {}
    for cell_id in manifest["cells"]:
        for label in manifest["judges"]:
            last = 0
            while judge_id(cell_id, grading.key(label, last + 1)) in asked:
                last += 1
            if not last:
                continue
            reply = replies.get(judge_id(cell_id, grading.key(label, last)))
            vote: dict[str, Any]
            if reply is None:
                vote = {"vote": None, "detail": "waiting for the judge", "reply": "", "pending": True}
            else:
                retry = reply.vote is None and not reply.error and last < attempts
                vote = {"vote": reply.vote, "detail": reply.detail, "reply": reply.text[:200], "pending": retry}
                if reply.score is not None:
                    vote["score"] = reply.score
            out.setdefault(cell_id, []).append({"judge": label, "attempt": last, **vote})
    return out


def manifest_of(run: Run) -> dict[str, Any] | None:
    """The judge stage's manifest, once compiled."""
    return run.stage_manifest(STAGE)
