"""Reading the data sets of RULER's QA tasks: SQuAD 2.0's dev set (qa_1) and HotpotQA's dev set in its distractor
setting (qa_2), files the user downloads (RULER's ``scripts/data/synthetic/json/download_qa_dataset.sh``) and keeps
as ``squad.json`` and ``hotpotqa.json``, RULER's names, or `nspec data fetch` keeps in the cache (`nspec.datasets`).

The whole file is read (through `nspec.inputs`, so only a regular file, never more than `LIMIT` bytes) and checked
for what RULER reads of it; the compiler gets the parsed rows as a `Corpus`. Every refusal is a `DatasetError`
(exit 2) that names the file, and where the file is there but wrong, the line and column of the first thing wrong.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from nspec.compiler.tasks.ruler.qa import Corpus, hotpotqa_corpus, squad_corpus
from nspec.errors import UserError
from nspec.inputs import read_input

LIMIT = 256 * 1024 * 1024  # HotpotQA's dev set is 46 MB, SQuAD's 4 MB
SOURCES = {
    "squad": (
        "SQuAD 2.0's dev set",
        ["https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v2.0.json"],
    ),
    "hotpotqa": (
        "HotpotQA's dev set in its distractor setting",
        [
            "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json",
            "https://huggingface.co/datasets/namlh2004/hotpotqa/resolve/7e54db4656209750ff487f6fdf8e39a66dba136b/"
            "hotpot_dev_distractor_v1.json",
        ],
    ),
}
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class DatasetError(UserError):
    """A RULER QA data set that is missing or not of its data set's shape."""


JsonPath = tuple[str | int, ...]  # keys and indices from the top of a JSON document
_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "true or false"}


class _Wrong(Exception):
    """The first place where a parsed file is not what RULER reads."""

    def __init__(self, path: JsonPath, message: str) -> None:
        self.path, self.message = path, message


def _where(path: JsonPath) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out or "the top level"


def _need(value: Any, kind: type, path: JsonPath, what: str) -> Any:
    if not isinstance(value, kind):
        found = {dict: "object", list: "list", str: "string", bool: "boolean"}.get(type(value), type(value).__name__)
        raise _Wrong(path, f"{what} must be {_KINDS[kind]}, not a {found}")
    return value


def _field(obj: dict[str, Any], key: str, kind: type, path: JsonPath, what: str) -> Any:
    if key not in obj:
        raise _Wrong(path, f"has no {key!r} ({what})")
    return _need(obj[key], kind, (*path, key), what)


def _check_squad(data: Any) -> None:
    _need(data, dict, (), "a SQuAD file")
    for a, article in enumerate(_field(data, "data", list, (), "the articles")):
        a_path: JsonPath = ("data", a)
        _need(article, dict, a_path, "an article")
        for p, paragraph in enumerate(_field(article, "paragraphs", list, a_path, "the article's paragraphs")):
            p_path: JsonPath = (*a_path, "paragraphs", p)
            _need(paragraph, dict, p_path, "a paragraph")
            _field(paragraph, "context", str, p_path, "the paragraph's text")
            for q, qa in enumerate(_field(paragraph, "qas", list, p_path, "the paragraph's questions")):
                q_path: JsonPath = (*p_path, "qas", q)
                _need(qa, dict, q_path, "a question")
                _field(qa, "question", str, q_path, "the question")
                impossible = _field(qa, "is_impossible", bool, q_path, "SQuAD 2.0 marks every question; 1.1 does not")
                answers = _field(qa, "answers", list, q_path, "the answers")
                if not impossible and not answers:
                    raise _Wrong((*q_path, "answers"), "an answerable question needs at least one answer")
                for n, answer in enumerate(answers):
                    _need(answer, dict, (*q_path, "answers", n), "an answer")
                    _field(answer, "text", str, (*q_path, "answers", n), "the answer's text")


def _check_hotpotqa(data: Any) -> None:
    _need(data, list, (), "a HotpotQA file (a list of questions)")
    for i, item in enumerate(data):
        _need(item, dict, (i,), "a question")
        _field(item, "question", str, (i,), "the question")
        _field(item, "answer", str, (i,), "its answer")
        for c, paragraph in enumerate(_field(item, "context", list, (i,), "its paragraphs, [title, sentences] each")):
            c_path: JsonPath = (i, "context", c)
            if not isinstance(paragraph, list) or len(paragraph) != 2:
                raise _Wrong(c_path, "a paragraph must be [title, sentences]")
            _need(paragraph[0], str, (*c_path, 0), "a paragraph's title")
            for n, sentence in enumerate(_need(paragraph[1], list, (*c_path, 1), "a paragraph's sentences")):
                _need(sentence, str, (*c_path, 1, n), "a sentence")


def _skip(text: str, pos: int) -> int:
    match = _WHITESPACE.match(text, pos)
    return match.end() if match else pos


def _offset(text: str, path: JsonPath) -> int:
    """Where the value at ``path`` starts in the JSON ``text``, walking to it with the decoder (only run to report
    an error, so the whole file is not parsed twice otherwise)."""
    pos = _skip(text, 0)
    for step in path:
        if isinstance(step, str) and text.startswith("{", pos):
            pos = _skip(text, pos + 1)
            while not text.startswith("}", pos):
                key, pos = _DECODER.raw_decode(text, pos)
                pos = _skip(text, _skip(text, pos) + 1)  # past the colon
                if key == step:
                    break
                pos = _skip(text, _DECODER.raw_decode(text, pos)[1])
                pos = _skip(text, pos + 1) if text.startswith(",", pos) else pos
        elif isinstance(step, int) and text.startswith("[", pos):
            pos = _skip(text, pos + 1)
            for _ in range(step):
                pos = _skip(text, _DECODER.raw_decode(text, pos)[1])
                pos = _skip(text, pos + 1)  # past the comma
    return pos


def _line_column(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def read_rows(dataset: str, path: str) -> Any:
    """The parsed file of ``dataset`` ("squad" or "hotpotqa") at ``path``, checked to have what RULER reads."""
    name, urls = SOURCES[dataset]
    if not os.path.lexists(path):
        raise DatasetError(
            f"{path}: not found. It is {name}, which RULER's qa task reads: name the copy nspec fetches, "
            f"`{dataset}: data:{dataset}` (after `nspec data fetch {dataset}`), or download it from "
            + " or ".join(urls)
            + f" and save it as {path}"
        )
    data = read_input(path, LIMIT)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start].decode("utf-8", "replace")
        line, column = _line_column(before, len(before))
        raise DatasetError(f"{path}:{line}:{column}: not UTF-8 text ({name} is JSON)") from None
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg} ({name} is a JSON file)") from None
    try:
        (_check_squad if dataset == "squad" else _check_hotpotqa)(rows)
    except _Wrong as wrong:
        line, column = _line_column(text, _offset(text, wrong.path))
        raise DatasetError(f"{path}:{line}:{column}: {_where(wrong.path)}: {wrong.message}; is this {name}?") from None
    return rows


def read_corpus(dataset: str, path: str) -> Corpus:
    """The documents and questions of ``dataset`` at ``path``, as RULER reads them."""
    rows = read_rows(dataset, path)
    return squad_corpus(rows) if dataset == "squad" else hotpotqa_corpus(rows)
