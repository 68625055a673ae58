"""The `mrcr` family: OpenAI's MRCR (multi-round co-reference resolution). A conversation in which the user asks
for pieces of writing — "Write a poem about tapirs" — and the assistant's turns hold them; 2, 4 or 8 identical
asks are hidden among the others, and the last user turn asks for one of their answers, by its order, with a random
string prepended. Expected: the string and that answer; scored by `sequence_ratio` (OpenAI's grade).

The conversation is generated to the cell's length (`Sized`: more exchanges at longer lengths), the assistant's
pieces cut from a shipped public-domain corpus or a user's file; or, with `data:`, the rows of OpenAI's published
file are sent as they are (`Fixed`). The final turn is OpenAI's, word for word (huggingface.co/datasets/openai/mrcr):
"Prepend {string} to the {N}th (1 indexed) {form} about {topic}. Do not include any other text in your response."
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from nspec.prompt import Role, Turn

from ..draws import Draws
from ..haystack import corpus_documents
from ..json_input import Record
from . import Axis, Built, Detail, Draft, Family, Fixed, ParamError, Setup, Sized, Slot, Task, datafile

FORMS = (
    "poem",
    "short story",
    "blog post",
    "social media post",
    "essay",
    "letter",
    "speech",
    "diary entry",
    "news article",
    "riddle",
)
TOPICS = (
    "tapirs",
    "rocks",
    "lighthouses",
    "bread",
    "owls",
    "rivers",
    "clocks",
    "bees",
    "glaciers",
    "violins",
    "harbours",
    "moths",
    "orchards",
    "kites",
    "salt",
    "comets",
)
NEEDLES = (2, 4, 8)
CORPORA = ("austen", "kjv")  # the shipped public-domain texts
PIECE_WORDS = 120  # the least words in a piece cut from a corpus: paragraphs are joined until they reach it
PIECES_LIMIT = 64 * 1024 * 1024  # bytes of a user's file of pieces
STRING_LENGTH = 10  # characters of the random string to prepend, as OpenAI's ("aYooSG8CQg")
USER: Role = "user"
ASSISTANT: Role = "assistant"
_ALPHANUMERIC = string.ascii_letters + string.digits
_BLANK_LINES = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def ask(form: str, topic: str) -> str:
    return f"Write a {form} about {topic}"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def final_turn(prefix: str, index: int, form: str, topic: str) -> str:
    return (
        f"Prepend {prefix} to the {ordinal(index)} (1 indexed) {form} about {topic}. "
        "Do not include any other text in your response."
    )


def cut(text: str, words: int) -> list[str]:
    """The text cut into pieces at sentence ends, each piece ending at the first sentence end once it has ``words``
    words; paragraphs stay apart (white space within one collapsed), so a piece may hold several."""
    pieces: list[str] = []
    paragraphs: list[str] = []  # of the piece being made
    sentences: list[str] = []  # of its last paragraph
    count = 0
    for paragraph in _BLANK_LINES.split(text):
        for sentence in _SENTENCE_END.split(" ".join(paragraph.split())):
            if not sentence:
                continue
            sentences.append(sentence)
            count += len(sentence.split())
            if count >= words:
                pieces.append("\n\n".join([*paragraphs, " ".join(sentences)]))
                paragraphs, sentences, count = [], [], 0
        if sentences:
            paragraphs.append(" ".join(sentences))
            sentences = []
    return pieces


@functools.cache
def corpus_pieces(corpus: str) -> tuple[tuple[str, ...], int]:
    """A shipped corpus cut into pieces, with the fewest words a piece has."""
    pieces = tuple(p for _, data in corpus_documents(corpus) for p in cut(data.decode("utf-8"), PIECE_WORDS))
    return pieces, min(len(p.split()) for p in pieces)


class MrcrFamily(Family):
    name = "mrcr"
    params_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "needles": {
                "description": "How many identical asks are hidden in the conversation: 2, 4 or 8.",
                "enum": list(NEEDLES),
                "default": 2,
            },
            "corpus": {
                "description": "The shipped public-domain text the assistant's pieces are cut from.",
                "enum": list(CORPORA),
                "default": "austen",
            },
            "pieces": {
                "description": "A UTF-8 text file of your own, relative to the spec's folder: its pieces, separated "
                "by blank lines, are the assistant's answers (instead of `corpus`).",
                "type": "string",
                "minLength": 1,
            },
            "data": datafile.data_param(
                "OpenAI's published MRCR file (or one of its shape: `prompt`, a JSON list of messages, `answer` and "
                "`random_string_to_prepend`)",
                "its conversations are sent as they are, instead of generated ones",
            ),
            "rows": datafile.ROWS_PARAM,
        },
    }
    path_params = ("data", "pieces")
    axes = (Axis("needles", "Needles"),)
    details = (
        Detail("exchanges", "data.exchanges"),
        Detail("asked for the Nth", "data.index"),
        Detail("form", "data.form"),
        Detail("topic", "data.topic"),
        Detail("published row", "data.row"),
    )
    default_scoring = ({"sequence_ratio": True},)

    def task(self, setup: Setup) -> Conversations | PublishedConversations:
        params = setup.params
        rows = datafile.published(setup, ("needles", "corpus", "pieces"), "conversations", checked_row)
        if rows is not None:
            return PublishedConversations(rows)
        if "pieces" in params and "corpus" in params:
            raise ParamError(("corpus",), "give `corpus` or `pieces`, not both")
        pieces, fewest = own_pieces(setup) if "pieces" in params else corpus_pieces(params.get("corpus", "austen"))
        needles = params.get("needles", 2)
        fitting(setup, fewest, needles)
        return Conversations(pieces, needles)


def own_pieces(setup: Setup) -> tuple[tuple[str, ...], int]:
    """The pieces of the user's file, with the fewest words a piece has."""
    name = str(setup.params["pieces"])
    try:
        text = setup.read("pieces", PIECES_LIMIT).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParamError(("pieces",), f"{name}: is not UTF-8 text (byte {exc.start})") from None
    pieces = tuple(p.strip() for p in _BLANK_LINES.split(text) if p.strip())
    if len(pieces) < max(NEEDLES) + 1:
        raise ParamError(("pieces",), f"{name}: holds {len(pieces)} pieces; MRCR needs at least {max(NEEDLES) + 1}")
    return pieces, min(len(p.split()) for p in pieces)


def fitting(setup: Setup, fewest: int, needles: int) -> None:
    """Refuse a count of needles that cannot fit the shortest length: the needles' answers alone (each at least as
    many tokens as the shortest piece has words, ``fewest``: no tokenizer here joins words) and the answer budget
    must fit it."""
    lengths = setup.grid.get("context_lengths")
    prompt = setup.spec.get("prompt")
    reserve = prompt.get("reserve_tokens", 300) if isinstance(prompt, Mapping) else 300
    given = [n for n in lengths if isinstance(n, int)] if isinstance(lengths, list) else []
    if not given or not isinstance(reserve, int):
        return  # a grid of ranges, or one the schema refuses: compile's own fit says it
    shortest_length = min(given)
    least = needles * fewest + reserve
    if least > shortest_length:
        raise ParamError(
            ("needles",),
            f"{needles} needles cannot fit a context length of {shortest_length:,}: their answers alone and "
            f"reserve_tokens take at least {least:,} tokens; use fewer needles or longer lengths",
        )


class Conversations(Task):
    def __init__(self, pieces: Sequence[str], needles: int) -> None:
        self.pieces, self.needles = pieces, needles

    def cells(self, lengths: Sequence[int]) -> int:
        return len(lengths)

    def drafts(self, slot: Slot) -> Iterator[Draft]:
        draws = slot.draws("mrcr", slot.length, slot.trial, self.needles)
        form, topic = draws.choice(FORMS), draws.choice(TOPICS)
        index = 1 + draws.below(self.needles)
        prefix = "".join(draws.choice(_ALPHANUMERIC) for _ in range(STRING_LENGTH))
        places = sorted(draws.uniform() for _ in range(self.needles))  # where the needles go, as shares
        stream = Exchanges(self.pieces, [(f, t) for f in FORMS for t in TOPICS if (f, t) != (form, topic)], draws)
        answers = [stream.piece() for _ in range(self.needles)]  # the needles' answers, drawn first
        question = final_turn(prefix, index, form, topic)

        def build(size: int) -> Built:
            """The needles among the first ``size`` other exchanges, at the same shares of the conversation."""
            exchanges = stream.first(size)
            for k, share in reversed(list(enumerate(places))):
                exchanges.insert(round(share * size), (ask(form, topic), answers[k]))
            history = tuple(
                Turn(role, text) for request, piece in exchanges for role, text in ((USER, request), (ASSISTANT, piece))
            )
            data = {"prefix": prefix, "index": index, "form": form, "topic": topic, "exchanges": len(exchanges)}
            if any(drawn < size for drawn in stream.rounds):  # said, never silent: a piece is there twice
                data["pieces_repeat"] = True
            return Built(question, "", [prefix + answers[index - 1]], data, history)

        yield Draft({"needles": self.needles}, Sized(build), question, data={"needles": self.needles})


class Exchanges:
    """One slot's other exchanges, drawn once and in order (the conversation of n exchanges is the first n): an ask
    among ``asks`` and a piece not used before in the conversation, until every piece is (then they come round
    again)."""

    def __init__(self, pieces: Sequence[str], asks: list[tuple[str, str]], draws: Draws) -> None:
        self.pieces, self.asks, self.draws = pieces, asks, draws
        self.drawn: list[tuple[str, str]] = []
        self.used: set[int] = set()
        self.rounds: list[int] = []  # how many exchanges were drawn when the pieces came round again

    def piece(self) -> str:
        if len(self.used) == len(self.pieces):
            self.used.clear()
            self.rounds.append(len(self.drawn))
        while True:
            i = self.draws.below(len(self.pieces))
            if i not in self.used:
                self.used.add(i)
                return self.pieces[i]

    def first(self, n: int) -> list[tuple[str, str]]:
        while len(self.drawn) < n:
            self.drawn.append((ask(*self.draws.choice(self.asks)), self.piece()))
        return self.drawn[:n]


class PublishedConversations(Task):
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def cells(self, lengths: Sequence[int]) -> int:
        return len(self.rows)

    def drafts(self, slot: Slot) -> Iterator[Draft]:
        for row in self.rows:
            turns = row["turns"]
            yield Draft(
                {"item": f"row-{row['row']}", "needles": row["needles"]},
                Fixed(turns),
                turns[-1].text,
                [row["answer"]],
                data={"prefix": row["prefix"], "needles": row["needles"], "row": row["row"]},
            )


def checked_row(record: Record, index: int) -> dict[str, Any]:
    """A row of OpenAI's file, with what is read of it: its messages alternate user and assistant, from a user
    turn to a user turn; its answer holds more than the random string (else it would pass the reply that says
    nothing but the string)."""
    row = record.value
    if not isinstance(row, dict):
        raise record.refusal("a row is an object with prompt, answer and random_string_to_prepend")
    prompt = row.get("prompt")
    messages = record.embedded(prompt, ("prompt",), "a JSON list of messages") if isinstance(prompt, str) else prompt
    if not isinstance(messages, list):
        messages = []
    roles: list[Role] = ["user" if i % 2 == 0 else "assistant" for i in range(len(messages))]
    if (
        not roles
        or roles[-1] != "user"
        or not all(
            isinstance(m, dict) and m.get("role") == r and isinstance(m.get("content"), str)
            for m, r in zip(messages, roles, strict=True)
        )
    ):
        raise record.refusal(
            "`prompt` must be a list of messages ({role, content}) alternating user and assistant, from a user "
            "message to a user message"
        )
    answer, prefix = row.get("answer"), row.get("random_string_to_prepend")
    if not isinstance(answer, str) or not isinstance(prefix, str):
        raise record.refusal("`answer` and `random_string_to_prepend` must be text")
    if not answer.strip():
        raise record.refusal("`answer` is empty: the cell would pass a reply that says nothing")
    if not answer.removeprefix(prefix).strip():  # the grade strips the string from both before comparing
        raise record.refusal(
            "`answer` holds nothing past `random_string_to_prepend`: the cell would pass a reply that is only the "
            "string"
        )
    needles = row.get("n_needles")
    return {
        "row": index,
        "turns": tuple(Turn(r, m["content"]) for m, r in zip(messages, roles, strict=True)),
        "answer": answer,
        "prefix": prefix,
        "needles": needles if isinstance(needles, int) and not isinstance(needles, bool) else None,
    }


FAMILY = MrcrFamily()
