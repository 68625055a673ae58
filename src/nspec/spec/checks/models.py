"""The models (and the judges' models): their providers installed, their entries valid for them, their params
what their APIs take, their answer budgets, and where their requests and keys go."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nspec import jsonl
from nspec.compiler.prices import close_names, table_entry
from nspec.compiler.providers.contract import Provider
from nspec.compiler.providers.credentials import key_destination_problem
from nspec.compiler.providers.registry import names, provider
from nspec.compiler.tokenizers import MIN_PROXY_FACTOR
from nspec.errors import UserError
from nspec.spec.yamlsource import Path, format_path

from .base import SpecChecker

# Request fields nspec sets itself; a spec setting them in `params` would silently change the experiment.
RESERVED_PARAMS = ("model", "messages", "system", "stream", "n")


def check_models(c: SpecChecker) -> None:
    labels: dict[str, Path] = {}
    for path, model in c.model_entries():
        label = model.get("name", model.get("id"))
        if isinstance(label, str):
            if label in labels:
                c.error(path, f"model {label!r} appears twice; give one of them a distinct `name`")
            labels[label] = path
        model_settings(c, path, model, c.model_reserves(model))


def model_settings(c: SpecChecker, path: Path, model: dict[str, Any], reserves: list[int]) -> None:
    model_id = model.get("id")
    name = model_id.split("/", 1)[0] if isinstance(model_id, str) and "/" in model_id else None
    api = None
    if name is not None:
        try:
            api = provider(name)
        except UserError as exc:
            c.error((*path, "id"), str(exc))
    if api is not None:
        for where, message in api.model_issues(model):
            c.error((*path, *where), message)
        if path[0] == "models":
            _prefill(c, path, model, api)
            _answer_budget(c, path, model, api, reserves)
    _destination(c, path, model, api is not None)
    tokenizer = model.get("tokenizer")
    choice = tokenizer.get("name") if isinstance(tokenizer, dict) else tokenizer
    if choice == "model" and api is not None and not api.own_tokenizer:
        own = ", ".join(n for n in names() if provider(n).own_tokenizer)
        c.error(
            (*path, "tokenizer"),
            f"`tokenizer: model` (the model's own) is available for {own} models only",
        )
    if isinstance(tokenizer, dict) and ("factor" in tokenizer or "margin" in tokenizer) and choice != "proxy":
        key = "factor" if "factor" in tokenizer else "margin"
        c.error((*path, "tokenizer", key), f"`{key}` applies to the proxy tokenizer only", at_key=True)
    factor = tokenizer.get("factor") if isinstance(tokenizer, dict) else None
    if isinstance(factor, int | float) and not isinstance(factor, bool) and 0 < factor < MIN_PROXY_FACTOR:
        c.error(
            (*path, "tokenizer", "factor"),
            f"{factor:g} counts a text as less than {MIN_PROXY_FACTOR:g} times its o200k_base tokens, as no "
            f"tokenizer does: a generated context would grow to {1 / factor:,.3g} times its length before it seemed "
            f"to fill it; the factor is at least {MIN_PROXY_FACTOR:g}",
        )
    params = model.get("params")
    if isinstance(params, dict):
        for key in RESERVED_PARAMS:
            if key in params:
                c.error(
                    (*path, "params", key),
                    f"`{key}` is set by nspec from the spec; remove it",
                    at_key=True,
                )
        for where, value in _integers(params, (*path, "params")):
            if not jsonl.within_64_bits(value):
                c.error(
                    where,
                    f"{value} is past 64 bits: request files hold whole numbers of at most 64 bits (read "
                    "back, a larger one becomes an inexact float)",
                )
        for key in ("max_tokens", "max_completion_tokens"):
            limit = params.get(key)
            if key in params and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
                c.error((*path, "params", key), f"must be a whole number of tokens, at least 1 (got {limit!r})")
            elif isinstance(limit, int) and reserves and limit > min(reserves) and not _context_only(c):
                c.error(
                    (*path, "params", key),
                    f"{key} ({limit}) exceeds reserve_tokens ({min(reserves)}): the answer could "
                    "overflow the context length; raise reserve_tokens or lower max_tokens",
                )


def _integers(value: Any, path: Path) -> Iterator[tuple[Path, int]]:
    """The whole numbers in a parameter's value, each with its path."""
    if isinstance(value, int) and not isinstance(value, bool):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _integers(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _integers(item, (*path, i))


def _answer_budget(c: SpecChecker, path: Path, model: dict[str, Any], api: Provider, reserves: list[int]) -> None:
    """A model without `max_tokens` answers within `reserve_tokens`: what its API refuses of that budget (a
    thinking budget it does not exceed) is refused here, as `compile` would write it."""
    given = model.get("params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    if not reserves or any(params.get(k) is not None for k in ("max_tokens", "max_completion_tokens")):
        return
    budget = min(reserves)
    why = api.refused_params({**model, "params": {**params, "max_tokens": budget}}).get("max_tokens")
    if why is not None:
        c.error(
            (*path, "params") if params else path,
            f"{why}; with no max_tokens its answer budget is reserve_tokens ({budget}): set max_tokens, or raise "
            "reserve_tokens",
        )


def _context_only(c: SpecChecker) -> bool:
    """Whether the context length counts the haystack and needles only (`boundary: period-token`, as
    needlehaystack does): `reserve_tokens` is then its buffer, not room for the answer."""
    haystack = c.data.get("haystack")
    return isinstance(haystack, dict) and haystack.get("boundary") == "period-token"


def _prefill(c: SpecChecker, path: Path, model: dict[str, Any], api: Provider) -> None:
    """A prefill is sent to a model only if it continues it; others would read it as an earlier turn of the
    conversation, which is another experiment than the one the spec describes."""
    override = model.get("prompt")
    if isinstance(override, dict) and "prefill" in override:
        sources: list[tuple[Path, Any]] = [((*path, "prompt", "prefill"), override["prefill"])]
    else:
        sources = [((*where, "prefill"), e["prefill"]) for where, e in c.prompt_entries() if "prefill" in e]
    for source, text in sources:
        problem = api.prefill_problem(model, text) if isinstance(text, str) else None
        if problem is not None:
            c.error(source, f"{model.get('id')} ({format_path(path)}) {problem}{_misspelt(model)}")
            break


def _misspelt(model: dict[str, Any]) -> str:
    """A word for a rule that refuses a model's id as its API reads it, where the id is probably misspelt (not in
    the price table, a listed model's name close to it): the misspelling, not the rule, is what to fix."""
    model_id = model.get("id")
    if not isinstance(model_id, str) or table_entry(model_id) is not None:
        return ""
    close = close_names(model_id)
    return f" (is {model_id!r} misspelt? did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def _destination(c: SpecChecker, path: Path, model: dict[str, Any], known: bool) -> None:
    """Where the model's requests and key go is the top-level spec's to say: an included file (someone else's,
    perhaps) may not redirect them. A standard key goes only to its provider or to this machine."""
    for key in ("base_url", "api_key_env", "headers", "query"):
        where = c.source.key((*path, key))
        if key in model and c.top_file is not None and where.file != c.top_file:
            c.error(
                (*path, key),
                f"`{key}` may be set only in the spec you run ({c.top_file}), not by an included file: "
                "where requests and keys go is yours to say",
                at_key=True,
            )
    if known and isinstance(model.get("base_url"), str) and isinstance(model.get("id"), str):
        problem = key_destination_problem(model)
        if problem is not None:
            c.error((*path, "base_url"), problem)
