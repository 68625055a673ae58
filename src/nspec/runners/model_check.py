"""Before the first paid request: each provider's free list of models is asked whether the run's models exist, so
that a misspelt id (`openai/gpt-4.1-mnii`) is refused with "did you mean" at the model's line of the spec, not by the
provider hours into a batch or seconds into a live run. `nspec validate` stays offline (it only warns about an id no
price is known for); a model too new for nspec's tables is found in the provider's own list. A provider whose list
nspec does not read (`Provider.model_names` gives None) is not asked."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable

from nspec.compiler.providers.contract import model_name
from nspec.compiler.providers.io import Credentials
from nspec.compiler.providers.registry import provider
from nspec.errors import AuthenticationFailed, Location, NspecError, SpecError, SpecIssue
from nspec.runners.run_store import Run


def _names(name: str, creds: Credentials) -> frozenset[str] | None:
    """The provider's list; None where it has none here (a gateway, a proxy) or cannot give it now: the run's own
    requests say what is wrong then. A key refused is said now."""
    try:
        return provider(name).model_names(creds)
    except AuthenticationFailed:
        raise
    except NspecError:
        return None


_SNAPSHOT = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")  # a dated snapshot of a listed model


def check_models(run: Run, located: Callable[[int], Location]) -> None:
    """Refuse (`SpecError`, every missing model at once, ``located(i)`` being where `models[i].id` is) the run's
    models their provider's list lacks."""
    asked: dict[tuple[str, str | None], frozenset[str] | None] = {}
    issues = []
    ids = [str(entry["id"]) for entry in run.spec["models"]]
    for model in run.models():
        creds = model.credentials()
        key = (model.provider, creds.base_url)
        if key not in asked:
            asked[key] = _names(model.provider, creds)
        names = asked[key]
        name = model_name(model.entry)
        if names is None or name in names or _SNAPSHOT.sub("", name) in names:
            continue
        close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
        hint = f"; did you mean {model.entry['id'].split('/', 1)[0]}/{close[0]}?" if close else ""
        index = ids.index(str(model.entry["id"]))
        issues.append(
            SpecIssue(
                located(index),
                f"models[{index}].id",
                f"{name!r} is not among the models {model.provider} serves (its list of models, asked at "
                f"{creds.base_url or 'its API'}){hint}",
            )
        )
    if issues:
        raise SpecError(issues)
