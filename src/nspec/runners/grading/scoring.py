"""Scoring a run: every cell's answer graded by the spec's scorers (`grader.Scoring`, the same code as `nspec.grade`),
then the judges' votes folded in where the scorers left a cell undecided.

Writes `scores.jsonl`: per cell every scorer's verdict, the judges' votes, the final verdict and the score (1 pass,
0 fail, the share found for multi-value answers; none while undecided), and for cells with several target needles
the share of them the answer gives (`needles_found`, RULER's partial credit). A panel of `score-10` judges without a
threshold gives no verdict but a score: the cell is `scored`, its score the judges' mean (1-10). Cells whose request
failed are `error`; cells whose judges could not reach a quorum are `undecided` with `judge_error` set. None of these
counts in any pass rate.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from nspec import jsonl
from nspec.runners.grading import judging
from nspec.runners.grading.cascade import share_given
from nspec.runners.grading.grader import Scoring, decide
from nspec.runners.run_store import LineIndex, Run, checked_result
from nspec.scorers import GradeInput

JUDGE_ERROR = "undecided (judge error)"


def score_cell(
    scoring: Scoring | Sequence[Mapping[str, Any]] | None, cell: Mapping[str, Any], result: Mapping[str, Any]
) -> dict[str, Any]:
    """The scores.jsonl line of one cell, graded by ``scoring`` (a scoring list, or one resolved once for a run)."""
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
    inp = GradeInput.of(cell)
    verdicts = (scoring if isinstance(scoring, Scoring) else Scoring(scoring)).verdicts(answer, inp)
    final = decide(verdicts)
    line.update(
        scorers=[v.as_dict() for v in verdicts],
        votes=[],
        verdict=final.verdict,
        scorer_verdict=final.verdict,  # before any judge
        score=final.score,
        reason=final.reason if final.verdict != "undecided" else f"{final.scorer}: {final.reason}",
    )
    if len(cell["expected"]) > 1:
        line["needles_found"] = share_given(answer, cell["expected"], cell["question"], inp.needle)
    return line


def apply_votes(
    line: dict[str, Any], votes: list[dict[str, Any]], panel: int, rule: str, quorum: int
) -> dict[str, Any]:
    """Fold a cell's judge votes into its score line once no judge has more to say. Judges decide what the scorers
    left undecided; where a scorer decided (judges asked `always`, to calibrate), its verdict stands. A judge with no
    verdict is not a vote; with fewer than ``quorum`` votes the cell has no verdict (a judge error)."""
    line = {**line, "votes": votes}
    if len(votes) < panel or any(v["pending"] for v in votes):
        return line
    cast = [v["vote"] for v in votes if v["vote"] is not None]
    scores = [v["score"] for v in votes if "score" in v]
    mean = round(sum(scores) / len(scores), 2) if scores else None
    if mean is not None:
        line["judge_score"] = mean
    if len(cast) < quorum:
        line["judge_verdict"] = None
        if line["verdict"] == "undecided":
            line.update(
                judge_error=True,
                reason=f"judge error: {len(cast)} of {panel} judges gave a verdict, {quorum} needed "
                + "("
                + "; ".join(f"{v['judge']}: {v['detail']}" for v in votes if v["vote"] is None)
                + ")",
            )
        return line
    if judging.SCORED in cast:  # a score-10 panel without a threshold: a score, no verdict
        if line["verdict"] == "undecided":
            line.update(verdict=judging.SCORED, score=mean, reason=f"judges: mean score {mean} of {len(cast)}")
        return line
    verdict = judging.combine(cast, rule)
    line["judge_verdict"] = verdict
    if line["verdict"] == "undecided":
        line.update(
            verdict=verdict,
            score=1.0 if verdict == "pass" else 0.0,
            reason=f"judges: {cast.count('pass')} of {len(cast)} votes pass ({rule})",
        )
    return line


def verdict_key(line: dict[str, Any]) -> str:
    """How a score line is counted: its verdict, with judge errors told apart from plain undecided cells."""
    return JUDGE_ERROR if line.get("judge_error") else str(line["verdict"])


def score_run(run: Run) -> dict[str, int]:
    """Score every cell with a result into scores.jsonl (rewritten whole: scoring is cheap and deterministic),
    with the judges' votes where the judge stage has them. Returns the count of each verdict."""
    scoring = Scoring(run.spec.get("scoring"))
    votes = judging.votes(run)
    manifest = judging.manifest_of(run)
    panel = len(manifest["judges"]) if manifest else 0
    rule = manifest["vote"] if manifest else "majority"
    quorum = int(manifest.get("quorum") or panel // 2 + 1) if manifest else 0
    counts: dict[str, int] = {}

    def lines(results: LineIndex) -> Iterator[dict[str, Any]]:
        for cell in run.cells():
            result = results.get(cell["cell_id"])
            if result is None:
                continue
            line = score_cell(scoring, cell, result)
            if cell["cell_id"] in votes:
                line = apply_votes(line, votes[cell["cell_id"]], panel, rule, quorum)
            key = verdict_key(line)
            counts[key] = counts.get(key, 0) + 1
            yield line

    with LineIndex(run.paths.results("answers"), checked_result) as results:  # read when its cell comes
        jsonl.write(run.paths.scores, lines(results))
    return counts


def verdict_counts(run: Run) -> dict[str, int]:
    """How many cells of scores.jsonl have each verdict (empty before scoring)."""
    counts: dict[str, int] = {}
    for line in jsonl.read(run.paths.scores):
        key = verdict_key(line)
        counts[key] = counts.get(key, 0) + 1
    return counts
