"""The judge stage: judge prompts compiled into `judge/requests/` in each judge's provider format, run through the
same runners and ledger as the answers, then parsed into votes and combined.

Rubrics: `pass-fail` uses NIAN's verdict tokens — "aaa" passes, "bbb" fails, both or neither fail (tokens a correct
answer of "No" cannot be mistaken for); `score-10` is needlehaystack's 1-10 scale, passing at the spec's threshold.
Votes: `majority` passes only when passes outnumber fails (a tie fails), `unanimous`, or `any`.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from nspec.compiler.cells import models_of
from nspec.compiler.requests import encode_line, request_line
from nspec.compiler.run_directory import ShardWriter, effective_mode
from nspec.runners.rundir import Run, shard_lines

STAGE = "judge"
JUDGE_MAX_TOKENS = 16
ANSWER_OPEN, ANSWER_CLOSE = "<answer_to_grade>", "</answer_to_grade>"
_SCORE = re.compile(r"(?<!\d)(10|[1-9])(?:\s*/\s*10)?(?!\d)")
_SCALE = """\
Score the answer from 1 to 10:
1: unrelated to the expected answer.
3: minor relevance, but wrong.
5: moderately right, with inaccuracies.
7: aligned with the expected answer, with minor omissions.
10: completely accurate.
Reply with the score only."""


def judge_prompt(
    rubric: str, question: str, expected: list[str], alternates: list[str], answer: str, negative: bool
) -> tuple[str, str]:
    """The (system, user) messages asking a judge to grade one answer."""
    system = (
        "You grade answers to questions about a long document. You do not see the document: compare the "
        "answer with the expected answer. Be strict about facts, lenient about wording."
    )
    if negative:
        truth = (
            "Expected answer: none. The document does not contain the answer; a correct answer says so and "
            "gives no value of its own."
        )
    else:
        truth = "Expected answer: " + " | ".join(expected)
    lines = [f"Question: {question}", truth]
    if alternates:
        lines.append("Other answers that are also correct (examples):")
        lines += [f"- {a}" for a in alternates]
    lines.append(f"Answer to grade:\n{ANSWER_OPEN}\n{answer}\n{ANSWER_CLOSE}")
    if rubric == "pass-fail":
        lines.append(
            "If the answer to grade is correct, reply aaa. If it is not, reply bbb. Reply with aaa or bbb only."
        )
    else:
        lines.append(_SCALE)
    return system, "\n\n".join(lines)


def response_format(rubric: str) -> dict[str, Any]:
    """OpenAI structured output for a verdict: the reply is then exactly one token or one number, as JSON."""
    if rubric == "pass-fail":
        prop: dict[str, Any] = {"verdict": {"type": "string", "enum": ["aaa", "bbb"]}}
    else:
        prop = {"score": {"type": "integer", "minimum": 1, "maximum": 10}}
    schema = {"type": "object", "properties": prop, "required": list(prop), "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {"name": "verdict", "strict": True, "schema": schema}}


def parse_vote(rubric: str, text: str, threshold: int | None) -> tuple[str, str]:
    """A judge's reply as a vote (pass or fail) and what it said. A structured (JSON) reply is read first."""
    reply = (text or "").strip()
    if reply.startswith("{"):
        try:
            data = json.loads(reply)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            reply = str(data.get("verdict", data.get("score", reply)))
    if rubric == "pass-fail":
        has_pass, has_fail = "aaa" in reply.lower(), "bbb" in reply.lower()
        if has_pass and not has_fail:
            return "pass", "aaa"
        return "fail", "bbb" if has_fail and not has_pass else "both or neither verdict token"
    match = _SCORE.search(reply)
    if match is None:
        return "fail", "no score"
    score = int(match.group(1))
    return ("pass" if score >= (threshold or 7) else "fail"), f"score {score}"


def combine(votes: list[str], rule: str) -> str:
    passes, fails = votes.count("pass"), votes.count("fail")
    if rule == "unanimous":
        return "pass" if votes and fails == 0 else "fail"
    if rule == "any":
        return "pass" if passes else "fail"
    return "pass" if passes > fails else "fail"


def judge_settings(run: Run) -> dict[str, Any] | None:
    return next((s["judge"] for s in run.spec.get("scoring") or [] if "judge" in s), None)


def judge_key(label: str, rubric: str) -> str:
    """A short, stable key of a judge and the rubric it grades with: a request id stays the same when the panel
    around it changes, and a new rubric means new requests."""
    return hashlib.sha256(f"{label}\0{rubric}".encode()).hexdigest()[:6]


def judge_id(cell_id: str, key: str) -> str:
    return f"{cell_id}-{key}"  # at most 57 + 7 characters: within custom_id's 64


def compile_judges(run: Run) -> int:
    """Write the judge requests the current scoring needs and no earlier compile wrote (all of them the first
    time; after a rescore, only the new ones). Returns how many cells go to the judges. Reads scores.jsonl and the
    answers a line at a time; memory holds verdicts and the judged answers, not the run."""
    settings = judge_settings(run)
    if settings is None:
        return 0
    folder = run.path / STAGE
    rubric = settings.get("rubric", "pass-fail")
    always = settings.get("when", "undecided") == "always"
    verdicts = {}
    with open(run.path / "scores.jsonl", encoding="utf-8") as fh:
        for line in fh:
            score = json.loads(line)
            verdicts[score["cell_id"]] = score.get("scorer_verdict", score["verdict"])
    wanted = {cid for cid, v in verdicts.items() if v != "error" and (always or v == "undecided")}
    previous = manifest_of(run) or {"models": [], "cells": []}
    listed = {m["label"]: m for m in previous["models"]}
    done = {cid for m in previous["models"] for s in m["shards"] for cid, _ in shard_lines(run.path / s["file"])}
    models = models_of({"models": settings["models"]})
    todo = {(m.label, cid) for m in models for cid in wanted if judge_id(cid, judge_key(m.label, rubric)) not in done}
    texts = {}
    with open(run.path / "answers" / "results.jsonl", encoding="utf-8") as fh:
        for line in fh:
            result = json.loads(line)
            if result["cell_id"] in wanted:
                texts[result["cell_id"]] = result.get("text") or ""
    caps = run.spec.get("run", {}).get("shard", {})
    round_name = f"r{1 + max((len(m['shards']) for m in previous['models']), default=0)}"
    (folder / "requests").mkdir(parents=True, exist_ok=True)
    for model in models:
        key = judge_key(model.label, rubric)
        writer = ShardWriter(run.path, model, caps, stage=STAGE, round_name=round_name)
        for cell in run.cells():
            if (model.label, cell["cell_id"]) not in todo:
                continue
            system, user = judge_prompt(
                rubric,
                cell["question"],
                cell["expected"],
                cell.get("alternates", []),
                texts[cell["cell_id"]],
                cell["negative"],
            )
            # Structured output where the provider's own API has it (not every openai-compatible server does).
            params = model.params
            if model.provider == "openai":
                params = {"response_format": response_format(rubric), **model.params}
            line = request_line(
                model.provider,
                model.name,
                judge_id(cell["cell_id"], key),
                system,
                user,
                None,
                params,
                JUDGE_MAX_TOKENS,
            )
            writer.write(encode_line(line))
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
        "rubric": rubric,
        "vote": settings.get("vote", "majority"),
        "threshold": settings.get("threshold"),
        "when": settings.get("when", "undecided"),
        "judges": [m.label for m in models],
        "cells": sorted(wanted),
        "models": list(listed.values()),
    }
    tmp = folder / "manifest.json.part"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    tmp.replace(folder / "manifest.json")
    return len(wanted)


def votes(run: Run) -> dict[str, list[dict[str, Any]]]:
    """The current panel's votes per cell, from judge/results.jsonl (votes of judges or rubrics no longer in the
    spec's scoring are kept in the file but not counted)."""
    manifest = manifest_of(run)
    results_path = run.path / STAGE / "results.jsonl"
    if manifest is None or not results_path.is_file():
        return {}
    judges = {judge_key(label, manifest["rubric"]): label for label in manifest["judges"]}
    out: dict[str, list[dict[str, Any]]] = {}
    with open(results_path, encoding="utf-8") as fh:
        for line in fh:
            result = json.loads(line)
            cell_id, _, key = result["cell_id"].rpartition("-")
            if key not in judges:
                continue
            if result["status"] != "ok":
                vote, detail = "fail", f"no verdict: {(result.get('error') or {}).get('code')}"
            else:
                vote, detail = parse_vote(manifest["rubric"], result.get("text") or "", manifest["threshold"])
            out.setdefault(cell_id, []).append(
                {"judge": judges[key], "vote": vote, "detail": detail, "reply": (result.get("text") or "")[:200]}
            )
    return out


def manifest_of(run: Run) -> dict[str, Any] | None:
    """The judge stage's manifest, once compiled."""
    path = run.path / STAGE / "manifest.json"
    return json.loads(path.read_text("utf-8")) if path.is_file() else None
