"""Deterministic scoring: each scorer turns (answer, expected answers, options) into pass, fail or undecided with a
reason; the spec's scorers run in order and the first that decides wins. Negative controls (no needle) pass only
when the answer says the fact is not there and invents no value.

Writes `scores.jsonl`: per cell the verdict of every scorer, the final verdict and the score (1 pass, 0 fail, the
share found for all_of; none while undecided). Cells whose request failed are `error` and count in no pass rate.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nspec.runners import judging
from nspec.runners.rundir import Run

# Phrases that mean "the context does not say", used for negative controls unless a rails scorer gives its own.
NOT_FOUND = (
    "not found",
    "unanswerable",
    "does not contain",
    "doesn't contain",
    "does not mention",
    "doesn't mention",
    "no mention",
    "not mentioned",
    "cannot find",
    "can't find",
    "could not find",
    "couldn't find",
    "no information",
    "not provided",
    "not in the",
)
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")
_VALUE = re.compile(r"\d{3,}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_PUNCT = str.maketrans("", "", string.punctuation)


@dataclass(frozen=True)
class Verdict:
    kind: str
    verdict: str  # pass | fail | undecided
    reason: str
    score: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"scorer": self.kind, "verdict": self.verdict, "reason": self.reason, "score": self.score}


def normalize(text: str, options: dict[str, Any] | None) -> str:
    o = {"case": True, "whitespace": True, "punctuation": False, "numbers": True, **(options or {})}
    if o["numbers"]:
        text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    if o["case"]:
        text = text.casefold()
    if o["punctuation"]:
        text = text.translate(_PUNCT)
    if o["whitespace"]:
        text = " ".join(text.split())
    return text


def found_in(value: str, text: str) -> bool:
    """Whether ``value`` occurs in ``text`` as whole words: "No" is not found in "Nothing", 42 not in 1423."""
    if not value:
        return False
    start = r"(?<!\w)" if value[0].isalnum() or value[0] == "_" else ""
    end = r"(?!\w)" if value[-1].isalnum() or value[-1] == "_" else ""
    return re.search(start + re.escape(value) + end, text) is not None


def _values(template: str, expected: list[str]) -> list[str]:
    return [template.replace("{answer}", e) for e in expected]


def _options(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {"value": value} if isinstance(value, str) else {}


def says_not_found(answer: str, phrases: tuple[str, ...]) -> bool:
    text = normalize(answer, None)
    return any(found_in(normalize(p, None), text) for p in phrases)


def score_one(kind: str, spec: Any, answer: str, expected: list[str]) -> Verdict:
    """One scorer on one answer (a needle cell)."""
    opts = _options(spec)
    if kind in ("contains", "exact", "all_of"):
        norm = opts.get("normalize")
        wanted = [normalize(v, norm) for v in _values(opts.get("value", "{answer}"), expected)]
        got = normalize(answer, norm)
        if kind == "exact":
            hit = got in wanted
            return Verdict(
                kind,
                "pass" if hit else "undecided",
                "equals the expected answer" if hit else "the answer is not exactly the expected one",
                1.0 if hit else None,
            )
        found = [w for w in wanted if found_in(w, got)]
        if kind == "contains":
            ok = len(found) == len(wanted)
            return Verdict(
                kind, "pass" if ok else "fail", f"contains {len(found)} of {len(wanted)} expected", 1.0 if ok else 0.0
            )
        share = len(found) / len(wanted) if wanted else 0.0
        ok = share >= float(opts.get("threshold", 1.0))
        return Verdict(kind, "pass" if ok else "fail", f"found {len(found)} of {len(wanted)}", share)
    if kind == "regex":
        pattern = spec if isinstance(spec, str) else spec["pattern"]
        flags = re.IGNORECASE if (not isinstance(spec, dict) or spec.get("ignore_case", True)) else 0
        hits = [re.search(pattern.replace("{answer}", re.escape(e)), answer, flags) for e in expected or [""]]
        ok = all(hits)
        return Verdict(
            kind,
            "pass" if ok else "fail",
            "the pattern matches" if ok else "the pattern does not match",
            1.0 if ok else 0.0,
        )
    if kind == "number":
        tolerance = float(opts.get("tolerance", 0))
        numbers = [float(n.replace(",", "")) for n in _NUMBER.findall(answer)]
        targets = []
        for e in expected:
            try:
                targets.append(float(e.replace(",", "")))
            except ValueError:
                return Verdict(kind, "undecided", f"the expected answer {e!r} is not a number")
        if not numbers:
            return Verdict(kind, "undecided", "the answer holds no number")
        ok = all(any(abs(n - t) <= tolerance for n in numbers) for t in targets)
        return Verdict(
            kind,
            "pass" if ok else "fail",
            "the expected number is there" if ok else f"numbers {numbers[:5]} do not include the expected",
            1.0 if ok else 0.0,
        )
    if kind == "rails":
        phrases = tuple(opts.get("not_found", NOT_FOUND))
        norm = opts.get("normalize")
        has_answer = all(found_in(normalize(e, norm), normalize(answer, norm)) for e in expected) if expected else False
        not_found = says_not_found(answer, phrases)
        if has_answer and not not_found:
            return Verdict(kind, "pass", "snaps to the expected answer", 1.0)
        if not_found and not has_answer:
            return Verdict(kind, "fail", "snaps to 'not found'", 0.0)
        return Verdict(kind, "undecided", "unparsable: snaps to both or neither")
    raise ValueError(f"unknown scorer {kind!r}")


def score_negative(answer: str, phrases: tuple[str, ...]) -> Verdict:
    """A negative control is right only if it says not found and invents no value."""
    not_found, invented = says_not_found(answer, phrases), _VALUE.search(answer) is not None
    if not_found and not invented:
        return Verdict("negative", "pass", "says not found and invents nothing", 1.0)
    if invented and not not_found:
        return Verdict("negative", "fail", "invents a value", 0.0)
    if not not_found:
        return Verdict("negative", "fail", "does not say the fact is missing", 0.0)
    return Verdict("negative", "undecided", "says not found but also gives a value")


def score_cell(scoring: list[dict[str, Any]], cell: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The scores.jsonl line of one cell."""
    line: dict[str, Any] = {
        "cell_id": cell["cell_id"],
        "model": cell["model"],
        "prompt": cell["prompt"],
        "negative": cell["negative"],
    }
    if result.get("status") != "ok":
        return {
            **line,
            "scorers": [],
            "votes": [],
            "verdict": "error",
            "score": None,
            "reason": f"no answer: {(result.get('error') or {}).get('code')}",
        }
    answer = result.get("text") or ""
    rails = next((s["rails"] for s in scoring if "rails" in s and isinstance(s["rails"], dict)), {})
    phrases = tuple(rails.get("not_found", NOT_FOUND))
    if cell["negative"]:
        verdicts = [score_negative(answer, phrases)]
    else:
        verdicts = [
            score_one(kind, spec, answer, cell["expected"])
            for entry in scoring
            for kind, spec in entry.items()
            if kind != "judge"
        ]
    final = next((v for v in verdicts if v.verdict != "undecided"), None)
    return {
        **line,
        "scorers": [v.as_dict() for v in verdicts],
        "votes": [],
        "verdict": final.verdict if final else "undecided",
        "scorer_verdict": final.verdict if final else "undecided",  # before any judge
        "score": final.score if final else None,
        "reason": final.reason if final else "no scorer could decide",
    }


def apply_votes(line: dict[str, Any], votes: list[dict[str, Any]], judges: int, rule: str) -> dict[str, Any]:
    """Fold a cell's judge votes into its score line, once every judge has voted. Judges decide what the scorers
    left undecided; where a scorer decided (judges asked `always`, to calibrate), its verdict stands."""
    line = {**line, "votes": votes}
    if len(votes) < judges:
        return line
    verdict = judging.combine([v["vote"] for v in votes], rule)
    line["judge_verdict"] = verdict
    if line["verdict"] == "undecided":
        line.update(
            verdict=verdict,
            score=1.0 if verdict == "pass" else 0.0,
            reason=f"judges: {sum(v['vote'] == 'pass' for v in votes)} of {len(votes)} pass ({rule})",
        )
    return line


def score_run(run: Run) -> dict[str, int]:
    """Score every cell with a result into scores.jsonl (rewritten whole: scoring is cheap and deterministic),
    with the judges' votes where the judge stage has them."""
    scoring = run.spec.get("scoring") or [{"contains": "{answer}"}]
    results = _results(run.path / "answers" / "results.jsonl")
    votes = judging.votes(run)
    judge_manifest = judging.manifest_of(run)
    judges = len(judge_manifest["models"]) if judge_manifest else 0
    rule = judge_manifest["vote"] if judge_manifest else "majority"
    counts: dict[str, int] = {}
    tmp = run.path / "scores.jsonl.part"
    with open(tmp, "w", encoding="utf-8") as out:
        for cell in run.cells():
            result = results.get(cell["cell_id"])
            if result is None:
                continue
            line = score_cell(scoring, cell, result)
            if cell["cell_id"] in votes:
                line = apply_votes(line, votes[cell["cell_id"]], judges, rule)
            counts[line["verdict"]] = counts.get(line["verdict"], 0) + 1
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    tmp.replace(run.path / "scores.jsonl")
    return counts


def _results(path: Path) -> dict[str, dict[str, Any]]:
    """Results by cell_id (only the fields scoring needs, so memory stays small)."""
    out: dict[str, dict[str, Any]] = {}
    if path.exists():
        for line in _lines(path):
            r = json.loads(line)
            out[r["cell_id"]] = {"status": r["status"], "text": r.get("text"), "error": r.get("error")}
    return out


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as fh:
        yield from fh
