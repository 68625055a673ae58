"""RULER's question answering (`qa_1` on SQuAD v2 dev, `qa_2` on HotpotQA dev in its distractor setting): one question
with its gold paragraphs among distractor documents, numbered ``Document i:``. Rebuilt from NVIDIA/RULER
``scripts/data/synthetic/qa.py`` (``read_squad``, ``read_hotpotqa``, ``generate_input_output``) with the template and
answer prefix of its ``constants.py``, word for word.

- Documents: SQuAD's paragraph contexts; HotpotQA's paragraphs as ``title + "\\n" + "".join(sentences)``. Each text
  once, sorted (RULER's numbering of the corpus).
- Questions, in file order: SQuAD's answerable ones (its impossible questions are skipped), answers every given
  answer text, gold the question's paragraph, and the other paragraphs of its article to be drawn first as
  distractors; HotpotQA's every question, answer its one answer, gold all ten paragraphs of its distractor setting.
  Sample i asks question i, as RULER's sample i does.
- A sample of ``num_docs`` documents: the gold ones, then the same article's others (drawn from them when they are
  more than needed), then documents drawn from the rest of the corpus; when ``num_docs`` reaches the corpus size,
  the whole corpus in order, repeated as far as needed. RULER shuffles them with its fixed seed, so every sample of
  a length puts its gold documents at the same places; so does this (the order is drawn from the task's seed and the
  number of documents).

Size: ``num_docs``. RULER's ``incremental`` is 10 documents; since 2025-06 RULER binary-searches every whole number
from there up (before that it grew by 10). HotpotQA needs at least its 10 gold documents.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nspec.compiler.draws import Draws
from nspec.compiler.tasks.ruler.sampling import DistinctIndices, fixed_order
from nspec.compiler.tasks.sizing import Built

TEMPLATE = (
    "Answer the question based on the given documents. Only give me the answer and do not output any other words.\n\n"
    "The following are given documents.\n\n{context}\n\nAnswer the question based on the given documents. Only give "
    "me the answer and do not output any other words.\n\nQuestion: {query}"
)
ANSWER_PREFIX = " Answer:"
DOCUMENT = "Document {i}:\n{document}"
TOKENS_TO_GENERATE = 32
INCREMENTAL = 10


@dataclass(frozen=True)
class Question:
    query: str
    answers: tuple[str, ...]
    gold: tuple[int, ...]  # documents holding the answer
    related: tuple[int, ...] = ()  # the rest of the question's article (SQuAD): drawn before any other document


@dataclass(frozen=True)
class Corpus:
    documents: tuple[str, ...]
    questions: tuple[Question, ...]


def squad_corpus(data: Mapping[str, Any]) -> Corpus:
    """RULER's ``read_squad`` over a parsed SQuAD v2 file."""
    articles = [[p["context"] for p in article["paragraphs"]] for article in data["data"]]
    documents = sorted({context for contexts in articles for context in contexts})
    number = {context: i for i, context in enumerate(documents)}
    questions = []
    for article, contexts in zip(data["data"], articles, strict=True):
        in_article = [number[c] for c in contexts]
        for paragraph in article["paragraphs"]:
            own = number[paragraph["context"]]
            for qa in paragraph["qas"]:
                if not qa["is_impossible"]:
                    questions.append(
                        Question(
                            query=qa["question"],
                            answers=tuple(a["text"] for a in qa["answers"]),
                            gold=(own,),
                            related=tuple(i for i in in_article if i != own),
                        )
                    )
    return Corpus(tuple(documents), tuple(questions))


def hotpotqa_corpus(data: Sequence[Mapping[str, Any]]) -> Corpus:
    """RULER's ``read_hotpotqa`` over a parsed HotpotQA file (a list of questions)."""

    def text(paragraph: Sequence[Any]) -> str:
        title, sentences = paragraph
        return f"{title}\n{''.join(sentences)}"

    documents = sorted({text(p) for item in data for p in item["context"]})
    number = {document: i for i, document in enumerate(documents)}
    questions = tuple(
        Question(
            query=item["question"], answers=(item["answer"],), gold=tuple(number[text(p)] for p in item["context"])
        )
        for item in data
    )
    return Corpus(tuple(documents), questions)


class QuestionAnswering:
    """The qa samples of one task at one length over ``corpus``. ``seed`` is the task's; sample ``sample`` asks
    question ``sample``."""

    def __init__(self, corpus: Corpus, seed: Hashable, sample: int) -> None:
        if not 0 <= sample < len(corpus.questions):
            raise ValueError(f"sample {sample} asks question {sample}; the corpus has {len(corpus.questions):,}")
        self.corpus, self.seed, self.sample = corpus, seed, sample
        self.question = corpus.questions[sample]

    def _documents(self, size: int) -> list[int]:
        documents, gold, related = self.corpus.documents, list(self.question.gold), list(self.question.related)
        if size >= len(documents):
            return (list(range(len(documents))) * -(-size // len(documents)))[:size]
        if size < len(gold):
            raise ValueError(f"{size} documents cannot hold the question's {len(gold)} gold ones")
        if size - len(gold) <= len(related):
            return gold + [related[i] for i in self._related.first(size - len(gold))]
        rest, drawn = self._rest
        return gold + related + [rest[i] for i in drawn.first(size - len(gold) - len(related))]

    @functools.cached_property
    def _related(self) -> DistinctIndices:
        """The draws of the question's article's other documents: the same at every size."""
        return DistinctIndices(Draws("ruler-qa", self.seed, self.sample, "related"), len(self.question.related))

    @functools.cached_property
    def _rest(self) -> tuple[list[int], DistinctIndices]:
        """The documents neither gold nor related, and the draws of them: the same at every size."""
        taken = {*self.question.gold, *self.question.related}
        rest = [i for i in range(len(self.corpus.documents)) if i not in taken]
        return rest, DistinctIndices(Draws("ruler-qa", self.seed, self.sample, "rest"), len(rest))

    def build(self, size: int) -> Built:
        """The sample with ``size`` documents; a larger size holds the documents of a smaller one and more."""
        chosen = self._documents(size)
        gold = set(self.question.gold)
        order = fixed_order("ruler-qa", self.seed, len(chosen))
        context = "\n\n".join(
            DOCUMENT.format(i=i + 1, document=self.corpus.documents[chosen[j]]) for i, j in enumerate(order)
        )
        return Built(
            text=TEMPLATE.format(context=context, query=self.question.query),
            answer_prefix=ANSWER_PREFIX,
            expected=list(self.question.answers),
            data={"documents": size, "gold_documents": [i + 1 for i, j in enumerate(order) if chosen[j] in gold]},
        )
