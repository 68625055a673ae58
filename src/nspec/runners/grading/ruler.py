"""RULER's scores, as NVIDIA/RULER computes them: ``scripts/eval/synthetic/constants.py`` (the two metrics and which
task uses which), ``scripts/eval/evaluate.py`` (how a prediction is cleaned first), and the results table of its
README and paper (Table 3): per length the average of the 13 task scores, their average over the lengths, the two
weighted averages, and the effective length.

- ``string_match_all``: per sample, the share of the expected strings found in the prediction (case-insensitive
  substring); the task's score is their mean in percent, rounded to 2 decimals. Used by niah, vt, cwe, fwe.
- ``string_match_part``: per sample, 1 if any expected string is found, else 0; same mean and rounding. Used by qa.
- A prediction is stripped, its control characters (U+0000 to U+001F) made newlines, and stripped again.
- Effective length (paper §4 and Table 3): "the maximum length passing this threshold", the threshold being
  Llama-2-7B's score at 4K, 85.6, a score equal to it passing (the README underlines Qwen3-32B's 85.6). Nothing in
  the definition asks every shorter length to pass too, so none is asked here; in RULER's published table no model
  passes at a length after failing at a shorter one, so the two readings never differ there.
- wAvg (inc) and (dec): averages over the lengths weighted 1, 2, ..., n from the shortest (inc) or the longest (dec).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

THRESHOLD = 85.6  # Llama-2-7B (chat) at 4K
LENGTHS = (4096, 8192, 16384, 32768, 65536, 131072)
_CONTROL = re.compile(r"[\x00-\x1f]")

Metric = Callable[[Sequence[str], Sequence[Sequence[str]]], float]


def postprocess(prediction: str) -> str:
    """RULER's ``postprocess_pred``."""
    return _CONTROL.sub("\n", prediction.strip()).strip()


def share_found(prediction: str, references: Sequence[str]) -> float:
    """One sample under ``string_match_all``: the share of ``references`` found in ``prediction``."""
    found = prediction.lower()
    return sum(1.0 if r.lower() in found else 0.0 for r in references) / len(references)


def any_found(prediction: str, references: Sequence[str]) -> float:
    """One sample under ``string_match_part``: 1 if any of ``references`` is found in ``prediction``."""
    found = prediction.lower()
    return max(1.0 if r.lower() in found else 0.0 for r in references)


def string_match_all(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """RULER's ``string_match_all`` (predictions already post-processed)."""
    score = sum(share_found(p, r) for p, r in zip(predictions, references, strict=True)) / len(predictions) * 100
    return round(score, 2)


def string_match_part(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """RULER's ``string_match_part`` (predictions already post-processed)."""
    score = sum(any_found(p, r) for p, r in zip(predictions, references, strict=True)) / len(predictions) * 100
    return round(score, 2)


# synthetic.yaml's 13 tasks, each with its metric (eval/synthetic/constants.py)
TASKS: dict[str, Metric] = {
    **{
        name: string_match_all
        for name in (
            "niah_single_1",
            "niah_single_2",
            "niah_single_3",
            "niah_multikey_1",
            "niah_multikey_2",
            "niah_multikey_3",
            "niah_multivalue",
            "niah_multiquery",
        )
    },
    "vt": string_match_all,
    "cwe": string_match_all,
    "fwe": string_match_all,
    "qa_1": string_match_part,
    "qa_2": string_match_part,
}


def task_score(task: str, predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """A task's score at one length, 0-100, from its raw predictions: RULER's evaluate.py for one task."""
    return TASKS[task]([postprocess(p) for p in predictions], references)


def length_score(task_scores: Mapping[str, float]) -> float:
    """The score of one length: the mean of its task scores."""
    return sum(task_scores.values()) / len(task_scores)


def effective_length(scores: Mapping[int, float], threshold: float = THRESHOLD) -> int | None:
    """The longest length whose score is at least ``threshold``; None when none is."""
    return max((length for length, score in scores.items() if score >= threshold), default=None)


def weighted_average(scores: Mapping[int, float], increasing: bool) -> float:
    """RULER's wAvg: weights 1..n over the lengths from the shortest (``increasing``) or from the longest."""
    lengths = sorted(scores)
    weights = range(1, len(lengths) + 1) if increasing else range(len(lengths), 0, -1)
    return sum(w * scores[length] for w, length in zip(weights, lengths, strict=True)) / sum(weights)


def kilo(length: int) -> str:
    """A length as RULER writes it: 4096 is 4K."""
    return f"{length // 1024}K" if length % 1024 == 0 else str(length)


def effective_label(effective: int | None, lengths: Sequence[int]) -> str:
    """RULER's column: ``<4K`` below the shortest length, ``>128K`` when the longest passes, else the length."""
    if effective is None:
        return f"<{kilo(min(lengths))}"
    return f">{kilo(effective)}" if effective == max(lengths) else kilo(effective)


def table(models: Mapping[str, Mapping[int, Mapping[str, float]]], threshold: float = THRESHOLD) -> str:
    """RULER's results table in Markdown, one row per model from ``{model: {length: {task: score}}}``: the effective
    length, each length's score (those at or above ``threshold`` underlined, as RULER marks them), the average and
    the two weighted averages, to one decimal."""
    lengths = sorted({length for by_length in models.values() for length in by_length})
    head = ["Model", "Effective Length", *map(kilo, lengths), "Avg.", "wAvg. (inc)", "wAvg. (dec)"]
    rows = ["|" + "|".join(head) + "|", "|" + "|".join([":---:"] * len(head)) + "|"]
    for model, by_length in models.items():
        scores = {length: length_score(tasks) for length, tasks in by_length.items()}
        cells = [
            "-" if n not in scores else f"<ins>{scores[n]:.1f}</ins>" if scores[n] >= threshold else f"{scores[n]:.1f}"
            for n in lengths
        ]
        average = sum(scores.values()) / len(scores)
        rows.append(
            "|"
            + "|".join(
                [
                    model,
                    effective_label(effective_length(scores, threshold), sorted(scores)),
                    *cells,
                    f"{average:.1f}",
                    f"{weighted_average(scores, True):.1f}",
                    f"{weighted_average(scores, False):.1f}",
                ]
            )
            + "|"
        )
    return "\n".join(rows)
