"""What is valid but probably not meant: models with no known price, answer budgets their reasoning would use up."""

from __future__ import annotations

import json
from typing import Any

from nspec.compiler.prices import close_names, table_entry
from nspec.compiler.providers.registry import provider
from nspec.errors import SpecIssue, UserError
from nspec.spec.yamlsource import Path, SourceMap, format_path

from .base import SpecChecker


def warnings(data: dict[str, Any], source: SourceMap) -> list[SpecIssue]:
    """What is valid but probably not meant: a model no price is known for (its cost will be unknown), with the
    listed models whose names are close to it; a model that reasons with an answer budget its reasoning would use
    up."""
    out = _prices(data, source)
    checker = SpecChecker(data, source, ".", [], None, None)
    judges = [path for path, _ in _entries(data) if path[0] != "models"]
    for path, model in _entries(data):
        if isinstance(model, dict) and isinstance(model.get("id"), str) and "/" in model["id"]:
            reserves = [] if path in judges else checker.model_reserves(model)
            problem = _budget_problem(model, reserves, path in judges)
            if problem is not None:
                where, message = problem
                out.append(SpecIssue(source.value((*path, *where)), format_path((*path, *where)), message))
    return out


def _budget_problem(model: dict[str, Any], reserves: list[int], judge: bool) -> tuple[Path, str] | None:
    """Where and why the model's answer budget cannot hold its reasoning and an answer (None: it can)."""
    try:
        api = provider(model["id"].split("/", 1)[0])
    except UserError:
        return None  # an unknown provider is an error, reported by `check`
    given = model.get("params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    thinking = api.reasoning(model)
    if thinking is not None and judge:  # a judge is asked to reason least (`judge_budget`)
        params = {**thinking.least, **params}
        thinking = api.reasoning({**model, "params": params})
    key = next((k for k in ("max_tokens", "max_completion_tokens") if isinstance(params.get(k), int)), None)
    limit = params[key] if key is not None else min(reserves, default=None)
    if thinking is None or limit is None or limit > thinking.tokens:
        return None  # a judge without max_tokens gets room for its reasoning
    where: Path = ("params", key) if key is not None else ("id",)
    said = f"max_tokens ({limit})" if key is not None else f"its answer budget, reserve_tokens ({limit})"
    lower = ", ".join(
        f"{k}: {v if isinstance(v, str) else json.dumps(v)}" for k, v in thinking.least.items() if params.get(k) != v
    )
    raise_it = (
        "raise its max_tokens, or set none: a judge then gets room for its reasoning"
        if judge
        else "raise max_tokens and reserve_tokens"
    )
    return where, (
        f"{model['id']} reasons ({thinking.how}), and its reasoning counts against {said}: it may use it all before "
        f"it answers; allow more than {thinking.tokens:,} tokens ({raise_it})"
        + (f", or have it reason less ({lower})" if lower else "")
    )


def _entries(data: dict[str, Any]) -> list[tuple[Path, Any]]:
    """Every model entry of the merged spec, and every judge model, with its path."""
    models, scoring = data.get("models"), data.get("scoring")
    entries: list[tuple[Path, Any]] = [
        (("models", i), m) for i, m in enumerate(models if isinstance(models, list) else [])
    ]
    for i, scorer in enumerate(scoring if isinstance(scoring, list) else []):
        judge = scorer.get("judge") if isinstance(scorer, dict) else None
        if isinstance(judge, dict) and isinstance(judge.get("models"), list):
            entries += [(("scoring", i, "judge", "models", j), m) for j, m in enumerate(judge["models"])]
    return entries


def _prices(data: dict[str, Any], source: SourceMap) -> list[SpecIssue]:
    """Models no price is known for, with the listed models whose names are close."""
    out = []
    for path, model in _entries(data):
        if not isinstance(model, dict) or not isinstance(model.get("id"), str) or "price" in model:
            continue
        model_id = model["id"]
        try:
            priced = provider(model_id.split("/", 1)[0]).priced
        except UserError:
            continue  # an unknown provider is an error, reported by `check`
        if not priced or table_entry(model_id) is not None:
            continue
        close = close_names(model_id)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "; set `price:` to estimate it"
        where = (*path, "id")
        out.append(
            SpecIssue(
                source.value(where),
                format_path(where),
                f"no price is known for {model_id!r}, so its cost will show as unknown{hint}",
            )
        )
    return out
