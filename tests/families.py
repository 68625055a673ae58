"""Task families written as a third party writes them, and installed as a package of one's own: the module text,
and a fixture that puts it on the path with a dist-info naming its `nspec.tasks` entry points.

`counting` is `Sized`: a list of words drawn from a small vocabulary, and the question how often one word occurs; the
framework sizes the list to each length. `replay` is `Fixed`: conversations given whole in its params, each placed at
the smallest grid length it fits.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.distributions import reload_plugins

MODULE = """
from nspec.compiler.tasks import Axis, Built, Draft, Family, Fixed, Sized, Task
from nspec.prompt import Turn

WORDS = ["apple", "pear", "plum", "fig", "lime", "kiwi", "date", "yuzu"]


class Counting(Family):
    name = "counting"
    params_schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "word": {"enum": WORDS, "default": "apple"},
            "vocabulary": {"type": "integer", "minimum": 2, "maximum": len(WORDS), "default": 4},
        },
    }
    default_scoring = ({"string_match_all": {}},)

    def task(self, setup):
        return CountingTask(setup.params, setup.negatives)


class CountingTask(Task):
    def __init__(self, params, negatives):
        self.word = params.get("word", "apple")
        self.vocabulary = WORDS[: params.get("vocabulary", 4)]
        if self.word not in self.vocabulary:
            self.vocabulary = [self.word, *self.vocabulary[1:]]

    def cells(self, lengths):
        return len(lengths)

    def drafts(self, slot):
        def build(size):
            draws = slot.draws("words", slot.length, slot.trial)  # the same list, one word longer per size
            words = [draws.choice(self.vocabulary) for _ in range(size)]
            count = words.count(self.word)
            text = (
                "Here is a list of words.\\n\\n" + " ".join(words)
                + f"\\n\\nHow many times does the word {self.word} occur in the list above?"
            )
            return Built(text, " The number of times is", [str(count)], {"count": count, "words": size})

        question = f"How many times does the word {self.word} occur in the list?"
        yield Draft({}, Sized(build, step=10), question)


class Replay(Family):
    name = "replay"
    params_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["rows"],
        "properties": {
            "rows": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "turns", "answer"],
                    "properties": {
                        "id": {"type": "string"},
                        "turns": {"type": "array", "items": {"type": "string"}},
                        "answer": {"type": "string"},
                    },
                },
            }
        },
    }
    axes = (Axis("row"),)
    default_scoring = ({"contains": "{answer}"},)

    def task(self, setup):
        return ReplayTask(setup.params["rows"])


class ReplayTask(Task):
    def __init__(self, rows):
        self.rows = rows

    def cells(self, lengths):
        return len(self.rows)

    def drafts(self, slot):
        for row in self.rows:
            turns = tuple(Turn("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(row["turns"]))
            yield Draft({"row": row["id"]}, Fixed(turns), row["turns"][-1], [row["answer"]])


COUNTING = Counting()
REPLAY = Replay()
"""


@pytest.fixture
def families(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The families above installed as the package `nspec_families`, found through its entry points."""
    site = tmp_path / "site"
    info = site / "nspec_families-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "nspec_families.py").write_text(textwrap.dedent(MODULE), encoding="utf-8")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nspec-families\nVersion: 0.1\n", encoding="utf-8")
    points = "[nspec.tasks]\ncounting = nspec_families:COUNTING\nreplay = nspec_families:REPLAY\n"
    (info / "entry_points.txt").write_text(points, encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    reload_plugins()
    yield site
    monkeypatch.undo()
    sys.modules.pop("nspec_families", None)
    reload_plugins()
