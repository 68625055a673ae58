"""OpenAI's graders of GraphWalks and MRCR, as their dataset cards on Hugging Face give them (openai/graphwalks,
openai/mrcr): `set_f1` and `sequence_ratio`."""

from __future__ import annotations

import difflib
import re
from typing import Any

from nspec.scorers import GradeInput, Verdict

from .builtin import BuiltIn, options_of, threshold, true_or

_FINAL_ANSWER = re.compile(r"Final Answer:\s*\[([^\[\]\n]*)\]")


def final_answer(text: str) -> list[str] | None:
    """The nodes of the last `Final Answer: [a, b, ...]` list in ``text`` (comma-separated, each stripped, empty
    ones dropped); None when there is none."""
    found = _FINAL_ANSWER.findall(text)
    if not found:
        return None
    return [item.strip() for item in found[-1].split(",") if item.strip()]


def _set_f1(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    """GraphWalks' grade: F1 between the set of nodes the reply's last `Final Answer:` list names and the expected
    set (the cell's `data.nodes`, else the expected answer's own list). As OpenAI's grader: recall and precision are
    0 when their set is empty, so an empty expected set scores 0 whatever the reply."""
    gold = inp.data.get("nodes")
    if gold is None:  # graded outside a run: the expected answer's own list, or the expected answers as nodes
        listed = final_answer(inp.expected[0])
        gold = listed if listed is not None else inp.expected
    truth = set(gold)
    given = final_answer(answer)
    if given is None:
        return Verdict("fail", "set_f1", "no `Final Answer: [...]` list", 0.0)
    sampled = set(given)
    overlap = len(sampled & truth)
    recall = overlap / len(truth) if truth else 0.0
    precision = overlap / len(sampled) if sampled else 0.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    ok = f1 >= float(options_of(spec).get("threshold", 1.0))
    reason = f"{overlap} of {len(truth)} expected nodes among {len(sampled)} given"
    return Verdict("pass" if ok else "fail", "set_f1", reason, round(f1, 6))


def _sequence_ratio(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    """MRCR's grade: 0 unless the reply starts with the cell's random string (`data.prefix`); else difflib's
    SequenceMatcher ratio between the reply and the expected answer, the string stripped from both."""
    prefix = str(inp.data.get("prefix", ""))
    expected = inp.expected[0]
    if not answer.startswith(prefix):
        return Verdict("fail", "sequence_ratio", "does not start with the string to prepend", 0.0)
    ratio = difflib.SequenceMatcher(None, answer.removeprefix(prefix), expected.removeprefix(prefix)).ratio()
    ok = ratio >= float(options_of(spec).get("threshold", 1.0))
    return Verdict("pass" if ok else "fail", "sequence_ratio", f"similarity {ratio:.3f}", round(ratio, 6))


SET_F1 = BuiltIn(
    "set_f1",
    "f1",
    true_or(
        "GraphWalks' metric (OpenAI's openai/graphwalks card): F1 between the node set of the answer's last "
        "`Final Answer: [...]` list and the expected set; pass when it reaches `threshold`.",
        threshold=threshold("F1 that passes. Default 1 (the exact set)."),
    ),
    _set_f1,
)
SEQUENCE_RATIO = BuiltIn(
    "sequence_ratio",
    "similarity",
    true_or(
        "MRCR's metric (OpenAI's openai/mrcr card): 0 unless the answer starts with the cell's random string; else "
        "difflib's SequenceMatcher ratio between answer and expected answer, the string stripped from both; pass "
        "when it reaches `threshold`.",
        threshold=threshold("Ratio that passes. Default 1 (the very text)."),
    ),
    _sequence_ratio,
)
