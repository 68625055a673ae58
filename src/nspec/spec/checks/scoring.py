"""Scoring: one judge entry, at the end; each scorer's options (`checks.scorers`); the judges' prompts and panels."""

from __future__ import annotations

import difflib
from typing import Any

from nspec.compiler.judge_prompts import PLACEHOLDERS, PRESETS
from nspec.spec.yamlsource import Path

from .base import SpecChecker
from .models import model_settings
from .scorers import scoring_issues


def check_scoring(c: SpecChecker) -> None:
    scoring = c.data.get("scoring")
    if not isinstance(scoring, list):
        return
    judges = [i for i, s in enumerate(scoring) if isinstance(s, dict) and "judge" in s]
    for i in judges[1:]:
        c.error(("scoring", i), "only one `judge` entry is allowed; list every judge under its `models`")
    if judges and judges[0] != len(scoring) - 1:
        c.error(
            ("scoring", judges[0]),
            "the `judge` entry must come last: it grades what the scorers above it leave undecided",
        )
    c.issues += scoring_issues(c.data, c.source)
    for i, scorer in enumerate(scoring):
        if not isinstance(scorer, dict):
            continue
        judge = scorer.get("judge")
        if isinstance(judge, dict):
            _judge(c, ("scoring", i, "judge"), judge, len(scoring))


def _judge(c: SpecChecker, path: Path, judge: dict[str, Any], entries: int) -> None:
    implied = _judge_prompt(c, (*path, "prompt"), judge)
    rubric = judge.get("rubric") or implied or "pass-fail"
    if rubric == "score-10" and "threshold" not in judge and entries > 1:
        by = f" (prompt {judge['prompt']} grades 1-10)" if implied and "rubric" not in judge else ""
        c.error(
            path,
            f"rubric score-10{by} without `threshold` gives scores, not verdicts, so the judges must grade every "
            "cell alone: give `threshold` (the lowest score that passes, e.g. 7) or leave the judge alone in scoring",
        )
    if rubric == "pass-fail" and "threshold" in judge:
        c.error((*path, "threshold"), "`threshold` applies to rubric score-10 only", at_key=True)
    models = judge.get("models")
    if not isinstance(models, list):
        return
    count = judge.get("quorum")
    if isinstance(count, int) and count > len(models):
        c.error(
            (*path, "quorum"),
            f"a quorum of {count} can never be reached by a panel of {len(models)} judge" + "s" * (len(models) != 1),
        )
    labels: set[str] = set()
    for j, entry in enumerate(models):
        label = (
            entry if isinstance(entry, str) else entry.get("name", entry.get("id")) if isinstance(entry, dict) else None
        )
        if isinstance(label, str):
            if label in labels:
                c.error((*path, "models", j), f"judge {label!r} is listed twice")
            labels.add(label)
        if isinstance(entry, dict):
            model_settings(c, (*path, "models", j), entry, [])


def _judge_prompt(c: SpecChecker, path: Path, judge: dict[str, Any]) -> str | None:
    """Check the judge's `prompt`: a preset that exists and agrees with `rubric`, or templates that are not empty,
    use only the judge placeholders and show the judge the answer. Returns the rubric a preset implies."""
    prompt = judge.get("prompt")
    presets = ", ".join(sorted(PRESETS))
    if isinstance(prompt, str):
        if not prompt.strip():
            c.error(path, f"the judge prompt is empty: name a preset ({presets}) or give {{system, user}}")
            return None
        preset = PRESETS.get(prompt)
        if preset is None:
            hint = difflib.get_close_matches(prompt, list(PRESETS), n=1)
            mean = f"; did you mean {hint[0]!r}?" if hint else ""
            c.error(path, f"unknown judge prompt preset {prompt!r}: the presets are {presets}{mean}")
            return None
        rubric = judge.get("rubric")
        if preset.rubric is not None and rubric is not None and rubric != preset.rubric:
            c.error(
                path,
                f"prompt {prompt} grades by rubric {preset.rubric}, but `rubric` is {rubric}: remove `rubric` "
                f"or set it to {preset.rubric}",
            )
        return preset.rubric
    if not isinstance(prompt, dict):
        return None
    empty = {"system": "write the judge's system message, or leave it out", "user": "write what asks the judge"}
    seen: dict[str, int] | None = {}  # the placeholders used (None: a template is unreadable or empty)
    for field, fix in empty.items():
        text = prompt.get(field)
        if not isinstance(text, str):
            continue
        found = c.template((*path, field), text, set(PLACEHOLDERS), "a judge prompt") if text.strip() else None
        if not text.strip():
            c.error((*path, field), f"`{field}` is empty: {fix}")
        seen = None if seen is None or found is None else {**seen, **found}
    if seen is not None and isinstance(prompt.get("user"), str) and "answer" not in seen:
        c.error((*path, "user"), "the judge never sees the answer it grades: put {answer} in `user`")
    return None
