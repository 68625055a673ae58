"""Reading the data sets of RULER's QA tasks: SQuAD 2.0's dev set (qa_1) and HotpotQA's dev set in its distractor
setting (qa_2), files the user downloads (RULER's ``scripts/data/synthetic/json/download_qa_dataset.sh``) and keeps
as ``squad.json`` and ``hotpotqa.json``, RULER's names, or `nspec data fetch` keeps in the cache (`nspec.datasets`).

The whole file is read (through `nspec.inputs`, so only a regular file, never more than `LIMIT` bytes), decoded as
untrusted (`compiler.json_input`) and checked for what RULER reads of it — and for questions no answer could fail or
pass: one with no paragraphs, an empty answer (every reply holds it), a SQuAD question none of whose answers its
paragraph holds. The
compiler gets the parsed rows as a `Corpus`. Every refusal is a `DatasetError` (exit 2) that names the file, and
where the file is there but wrong, the line and column of the first thing wrong.
"""

from __future__ import annotations

import os
from typing import Any

from nspec.compiler.json_input import DataError, JsonPath, Source, decode
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


class DatasetError(UserError):
    """A RULER QA data set that is missing or not of its data set's shape."""


_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "true or false"}


class _Wrong(Exception):
    """The first place where a parsed file is not what RULER reads."""

    def __init__(self, path: JsonPath, message: str) -> None:
        self.path, self.message = path, message


def _need(value: Any, kind: type, path: JsonPath, what: str) -> Any:
    if not isinstance(value, kind):
        raise _Wrong(path, f"{what} must be {_KINDS[kind]}, not a {_found(value)}")
    return value


def _field(obj: dict[str, Any], key: str, kind: type, path: JsonPath, what: str) -> Any:
    if key not in obj:
        raise _Wrong(path, f"has no {key!r} ({what})")
    if not isinstance(obj[key], kind):
        raise _Wrong((*path, key), f"must be {_KINDS[kind]}, not a {_found(obj[key])} ({what})")
    return obj[key]


def _found(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean"}.get(type(value), type(value).__name__)


def _check_squad(data: Any) -> None:
    _need(data, dict, (), "a SQuAD file")
    for a, article in enumerate(_field(data, "data", list, (), "the articles")):
        a_path: JsonPath = ("data", a)
        _need(article, dict, a_path, "an article")
        for p, paragraph in enumerate(_field(article, "paragraphs", list, a_path, "the article's paragraphs")):
            p_path: JsonPath = (*a_path, "paragraphs", p)
            _need(paragraph, dict, p_path, "a paragraph")
            context = _field(paragraph, "context", str, p_path, "the paragraph's text")
            for q, qa in enumerate(_field(paragraph, "qas", list, p_path, "the paragraph's questions")):
                q_path: JsonPath = (*p_path, "qas", q)
                _need(qa, dict, q_path, "a question")
                _field(qa, "question", str, q_path, "the question")
                impossible = _field(qa, "is_impossible", bool, q_path, "SQuAD 2.0 marks every question; 1.1 does not")
                answers = _field(qa, "answers", list, q_path, "the answers")
                if not impossible and not answers:
                    raise _Wrong((*q_path, "answers"), "an answerable question needs at least one answer")
                texts = []
                for n, answer in enumerate(answers):
                    n_path: JsonPath = (*q_path, "answers", n)
                    _need(answer, dict, n_path, "an answer")
                    texts.append(_field(answer, "text", str, n_path, "the answer's text"))
                    if not impossible:
                        _not_empty(texts[-1], (*n_path, "text"))
                if not impossible and not any(text in context for text in texts):
                    raise _Wrong(
                        (*q_path, "answers"),
                        "no answer its paragraph holds (SQuAD's answers are spans of it): no reply drawn from the "
                        "documents could pass",
                    )


def _not_empty(text: str, path: JsonPath) -> None:
    """Refuse an empty answer: every reply holds it, so no reply could fail its question."""
    if not text.strip():
        raise _Wrong(path, "an empty answer: every reply holds it, so no reply could fail the question")


def _check_hotpotqa(data: Any) -> None:
    _need(data, list, (), "a HotpotQA file (a list of questions)")
    for i, item in enumerate(data):
        _need(item, dict, (i,), "a question")
        _field(item, "question", str, (i,), "the question")
        _not_empty(_field(item, "answer", str, (i,), "its answer"), (i, "answer"))
        paragraphs = _field(item, "context", list, (i,), "its paragraphs, [title, sentences] each")
        if not paragraphs:
            raise _Wrong((i, "context"), "a question without paragraphs: no document would hold its answer")
        for c, paragraph in enumerate(paragraphs):
            c_path: JsonPath = (i, "context", c)
            if not isinstance(paragraph, list) or len(paragraph) != 2:
                raise _Wrong(c_path, "a paragraph must be [title, sentences]")
            _need(paragraph[0], str, (*c_path, 0), "a paragraph's title")
            for n, sentence in enumerate(_need(paragraph[1], list, (*c_path, 1), "a paragraph's sentences")):
                _need(sentence, str, (*c_path, 1, n), "a sentence")
        if not any(sentence.strip() for _, sentences in paragraphs for sentence in sentences):
            raise _Wrong(
                (i, "context"), "a question whose paragraphs hold no sentence: no document would hold its answer"
            )


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
    try:
        document = decode(Source(path, read_input(path, LIMIT)))
    except DataError as exc:
        raise DatasetError(f"{exc} ({name} is a JSON file)") from None
    try:
        (_check_squad if dataset == "squad" else _check_hotpotqa)(document.value)
    except _Wrong as wrong:
        reason = f"{wrong.message}; is this {name}?"
        error = document.error(reason if wrong.path else f"the top level: {reason}", wrong.path)
        raise DatasetError(str(error)) from None
    return document.value


def read_corpus(dataset: str, path: str) -> Corpus:
    """The documents and questions of ``dataset`` at ``path``, as RULER reads them."""
    rows = read_rows(dataset, path)
    return squad_corpus(rows) if dataset == "squad" else hotpotqa_corpus(rows)
