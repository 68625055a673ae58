"""Which rules of nspec's grading may decide: those whose precision, measured on labelled real answers, is above
the target with confidence. Elsewhere a rule says what it found and leaves the verdict to the judges.

`calibration.json` holds, per rule and verdict ("not-found → fail"), how many answers of the calibration sets it
decided and how many of them agree with their label (`python bench/grading.py --write` measures it again;
docs/scoring.md has the sets and the table). A rule decides where the lower bound of its precision (Wilson's score
interval, `Z` standard errors below) is at least `TARGET`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from nspec.scorers import Verdict

TARGET = 0.99  # the precision a rule must be shown to have before it decides
Z = 1.0  # the lower bound is one standard error below (one-sided confidence 84%)
Z95 = 1.6448536269514722  # one-sided 95%, shown beside it


@dataclass(frozen=True)
class Tally:
    """How many answers a rule decided, and how many of them agree with their label."""

    decided: int = 0
    agree: int = 0

    def add(self, right: bool) -> Tally:
        return Tally(self.decided + 1, self.agree + right)

    @property
    def precision(self) -> float:
        return self.agree / self.decided if self.decided else 0.0

    @property
    def lower(self) -> float:
        """The lower bound of its precision that decides whether it may decide (`Z`)."""
        return wilson_lower(self.agree, self.decided)

    @property
    def lower95(self) -> float:
        """The lower bound at one-sided 95% confidence."""
        return wilson_lower(self.agree, self.decided, Z95)


def wilson_lower(k: int, n: int, z: float = Z) -> float:
    """The lower bound of Wilson's score interval for ``k`` successes in ``n``."""
    if n == 0:
        return 0.0
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z * z / n))


def key_of(verdict: Verdict) -> str:
    """The rule and verdict calibration measures a verdict under: "key-words → pass"."""
    return f"{verdict.rule or verdict.scorer} → {verdict.verdict}"


@cache
def stored() -> dict[str, Any]:
    """calibration.json, read once (`stored.cache_clear()` after writing it)."""
    text = resources.files(__package__).joinpath("calibration.json").read_text(encoding="utf-8")
    found: dict[str, Any] = json.loads(text)
    return found


def measured() -> dict[str, Tally]:
    """The committed measurements (calibration.json): per rule and verdict, what it found on the calibration sets."""
    return {key: Tally(c["decided"], c["agree"]) for key, c in stored()["rules"].items()}


def decided_share(kind: str) -> float:
    """The share of answers of a kind ("free-text", "single-fact") the default cascade decided on the calibration
    sets (calibration.json)."""
    c = stored()["kinds"][kind]
    return float(c["decided"] / c["answers"])


def left_to_judges(cell: Mapping[str, Any]) -> float:
    """The share of answers like a cell's (a record of cells.jsonl) that the default cascade is expected to leave
    to the judges, from what it decided on the calibration sets: none of a negative control's (its own rule always
    decides); of a single-fact needle's (every expected value a number, a uuid or one or two words) and of a
    free-text answer's (a question about a stack item, as NIAN's, or a longer expected answer), what the cascade left
    undecided there."""
    if cell["negative"]:
        return 0.0
    single = cell.get("item") is None and all(len(value.split()) <= 2 for value in cell["expected"])
    return 1.0 - decided_share("single-fact" if single else "free-text")


def decides(verdict: Verdict) -> bool:
    """Whether a rule's pass or fail stands: its measured precision clears `TARGET` with confidence."""
    tally = measured().get(key_of(verdict))
    return tally is not None and tally.lower >= TARGET


def held_back(verdict: Verdict) -> Verdict:
    """A decisive verdict as it stands, or undecided where its rule's precision is not shown to clear `TARGET`."""
    if verdict.verdict == "undecided" or decides(verdict):
        return verdict
    tally = measured().get(key_of(verdict), Tally())
    shown = f"{tally.agree} of {tally.decided} right" if tally.decided else "not measured"
    reason = f"{verdict.reason} (would {verdict.verdict}; its rule is {shown} on labelled answers: the judges decide)"
    return Verdict("undecided", verdict.scorer, reason, None, verdict.rule)
