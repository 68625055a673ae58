"""Rules a JSON Schema cannot express: placeholders, cross-references between sections, grid arithmetic; one
module per part of the spec, each a function of the `SpecChecker` (`base`), run in the order of `check`. A task
family checks the sections it reads itself (`Family.check`)."""

from __future__ import annotations

from typing import Any

from nspec.errors import SpecIssue
from nspec.inputs import Confinement
from nspec.spec.yamlsource import SourceMap

from .base import SpecChecker
from .fit import family_fit, lengths_issue
from .grid import check_grid
from .haystack import check_haystack
from .models import check_models
from .prompts import check_prompts
from .scoring import check_scoring
from .task import check_task
from .warnings import warnings

__all__ = ["check", "family_fit", "lengths_issue", "warnings"]


def check(
    data: dict[str, Any],
    source: SourceMap,
    base_dir: str,
    schema_issues: list[SpecIssue] | None = None,
    confinement: Confinement | None = None,
    top_file: str | None = None,
) -> list[SpecIssue]:
    """Every semantic issue of a merged spec; ``base_dir`` is the folder that relative paths start from. Values the
    schema refused (``schema_issues``) are not computed with; files outside ``confinement`` are refused unread;
    destinations and key variables set outside ``top_file`` (the spec run) are refused."""
    c = SpecChecker(data, source, base_dir, schema_issues or [], confinement, top_file)
    check_task(c)
    check_prompts(c)
    check_haystack(c)
    check_grid(c)
    check_models(c)
    check_scoring(c)
    return c.issues
