"""A spec's `scoring` list checked against the installed scorers (`nspec.scorers`): each entry names one scorer, or
the judge (`checks.scoring`); its options are valid by the scorer's schema,
located like the spec's own errors, and by what the scorer's own check finds beyond it (a template's placeholders, a
pattern that does not compile). A scorer that cannot be used (not installed, failing to load, registered twice) or
whose metric cannot be is an error at its name, as the registry words it."""

from __future__ import annotations

import difflib
from typing import Any

from nspec.errors import SpecIssue
from nspec.plugins import PluginError
from nspec.scorers import JUDGE, METRICS, SCORERS, Scorer
from nspec.spec.schema import params_issues
from nspec.spec.yamlsource import Path, SourceMap, format_path


def scoring_issues(data: dict[str, Any], source: SourceMap) -> list[SpecIssue]:
    """Every issue of the scorers a merged spec names (its judge aside)."""
    scoring = data.get("scoring")
    issues: list[SpecIssue] = []
    for i, entry in enumerate(scoring if isinstance(scoring, list) else []):
        if not isinstance(entry, dict):
            continue  # the schema says what it should be
        at: Path = ("scoring", i)
        if len(entry) != 1:
            kinds = ", ".join(sorted([*SCORERS.names(), JUDGE]))
            shape = "must not be empty" if not entry else f"has {len(entry)} keys ({', '.join(entry)}) but takes"
            message = shape if not entry else f"{shape} exactly one of: {kinds}"
            issues.append(SpecIssue(source.value(at), format_path(at), message))
            continue
        ((kind, options),) = entry.items()
        if kind != JUDGE:
            issues += _entry_issues((*at, kind), kind, options, source)
    return issues


def _entry_issues(at: Path, kind: str, options: Any, source: SourceMap) -> list[SpecIssue]:
    if kind not in SCORERS:
        known = SCORERS.names()
        close = difflib.get_close_matches(kind, [*known, JUDGE], n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        message = f"unknown scorer {kind!r}{hint} (the installed scorers are {', '.join(known)}; or `{JUDGE}`)"
        return [SpecIssue(source.key(at), format_path(at), message)]
    try:
        scorer: Scorer = SCORERS.get(kind)
        METRICS.get(scorer.metric)
    except PluginError as exc:
        return [SpecIssue(source.key(at), format_path(at), str(exc))]
    issues = params_issues(options, scorer.options_schema, source, at)
    if issues:
        return issues
    found = [((*at, *where), problem) for where, problem in scorer.check(options)]
    return [SpecIssue(source.value(path), format_path(path), problem) for path, problem in found]
