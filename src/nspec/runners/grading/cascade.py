"""The default cascade `auto`, the scorer nspec grades free-text answers with when a spec names none: it decides what a
careful judge would decide the same way and leaves the rest undecided for the judges (docs/scoring.md has each rule
and its measured precision); and `share_given`, the share of several expected answers an answer gives as the cascade
reads it (RULER's partial credit, `needles_found`)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from nspec.scorers import GradeInput, Verdict

from . import calibration, freetext
from .builtin import BuiltIn, true_or
from .text import NOT_FOUND, normalize

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")

# Each rule decides only where its precision, measured on labelled answers of real models (`calibration`), is shown
# to clear the target; elsewhere it says "undecided" and the judges decide. A fail needs positive evidence: a refusal,
# a "not found" where the needle is there, a conflicting value of the expected kind (another number, uuid or name),
# the opposite yes/no, or a quoted source that is not the needle. That an answer's words differ from the needle's is
# never evidence: a correct paraphrase looks just like that.


def _plain(text: str) -> str:
    return " ".join(_ARTICLES.sub(" ", normalize(text, {"punctuation": True})).split())


def _auto(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    """The default cascade for free-text answers: decide what a careful judge would decide the same way, and say
    "undecided" otherwise. See docs/scoring.md for each rule and its measured precision."""
    return calibration.held_back(cascade(answer, inp))


def cascade(answer: str, inp: GradeInput) -> Verdict:
    """The cascade's own verdict: what its rules find, before those not shown precise enough are held back."""
    accepted, question, needle = inp.accepted, inp.question, inp.needle
    if len(answer) > freetext.LONGEST:
        return _undecided("too-long", freetext.TOO_LONG)
    reading = freetext.read(answer, needle)
    if not freetext.words(answer):
        return _fail("empty", "the answer is empty")
    plain = _plain(answer)
    if any(len(a) == 1 and plain == _plain(a[0]) for a in accepted):
        return _pass("equals", "equals an accepted answer")
    asked = freetext.stems_of(question)
    verdicts = [_one_alternative(answer, reading, alt, asked, question, needle) for alt in accepted]
    passing = [v for v in verdicts if v.verdict == "pass"]
    if passing:
        return max(passing, key=lambda v: v.score or 0.0)
    if all(v.verdict == "fail" for v in verdicts):
        return max(verdicts, key=lambda v: v.score or 0.0)
    if not any(freetext.says_not_there(v) for alt in accepted for v in alt):
        # What the answer does whatever the wording it is held to: refuses, says the answer is not there, or takes
        # the other side of a yes-or-no question.
        against = next((v for v in verdicts if v.verdict == "fail" and v.rule in _ANSWER_LEVEL), None)
        if against is not None:
            return against
    if not any(v.rule == "key-words" for v in verdicts) and _cites_other_text(reading, question):
        return _fail("other-text", "gives none of the expected answer and quotes text that is not the needle's")
    return next(v for v in verdicts if v.verdict == "undecided")


def _cites_other_text(reading: freetext.Reading, question: str | None) -> bool:
    """Whether the answer quotes a passage that is neither the needle nor the question: it answers from another
    part of the context."""
    return any(q.foreign and not (question and freetext.in_needle(q.text, question) >= 0.5) for q in reading.quotes)


_ANSWER_LEVEL = frozenset({"refusal", "not-found", "polar"})


def _pass(rule: str, reason: str) -> Verdict:
    return Verdict("pass", "auto", reason, 1.0, rule)


def _fail(rule: str, reason: str, score: float = 0.0) -> Verdict:
    return Verdict("fail", "auto", reason, score, rule)


def _undecided(rule: str, reason: str) -> Verdict:
    return Verdict("undecided", "auto", reason, None, rule)


def _one_alternative(
    answer: str,
    reading: freetext.Reading,
    values: tuple[str, ...],
    asked: frozenset[str],
    question: str | None,
    needle: str | None,
) -> Verdict:
    """The cascade against one accepted answer (one or several values, all needed)."""
    values = tuple(_spelled_as_in_needle(v, needle) for v in values)
    denies = any(freetext.says_not_there(v) for v in values)
    if not denies:
        if reading.refuses and not any(_given(reading, v, asked) == 1.0 for v in values):
            return _fail("refusal", "refuses to answer")
        if reading.opens_not_there(asked):
            answering = [
                c
                for s in reading.sentences[1:]
                for c in s.clauses
                if not c.not_there and not c.negated and c.stems - asked
            ]
            if answering and any(_given(reading, v, asked) == 1.0 for v in values):
                return _undecided("not-found", "says the context lacks the answer, then answers")
            quoted = " (quoting the needle)" if reading.quotes else ""
            return _fail("not-found", "says the context does not hold the answer" + quoted)
    if len(values) == 1:
        polar = _polarity(values[0])
        if polar is not None:
            return _polar(reading, polar, asked)
        if _UUID.fullmatch(values[0].strip()):
            return _uuid(answer, values[0].strip())
    shares = [_given(reading, v, asked) for v in values]
    share = sum(shares) / len(shares)
    numbers = _numbers_verdict(reading, values, asked, share)
    if numbers is not None and share < 1.0:
        return numbers
    if share == 1.0:
        echo = asked if question and freetext.negated(question) else frozenset()
        needle_stems = None if needle is None else freetext.stems_of(needle)
        return _checked_pass(reading, values, asked, needle_stems, denies, echo)
    if len(values) > 1 and all(_atomic(v, asked) for v in values):
        found = sum(s == 1.0 for s in shares)
        return _fail("multi-value", f"gives {found} of {len(values)} expected answers", found / len(values))
    if share == 0.0:
        names = _other_names(answer, values, question, needle)
        if names:
            return _fail("conflicting-value", f"names {', '.join(names[:3])}, not {' / '.join(values)}")
        return _undecided("no-key-words", "gives none of the expected answer's key words")
    return _undecided("partial", f"gives {share:.0%} of the expected answer's key words")


_TOKEN = re.compile(r"[A-Za-z][\w'-]*")


@lru_cache(maxsize=4096)
def _spelled_as_in_needle(value: str, needle: str | None) -> str:
    """An expected answer with its misspelt words spelt as the needle spells them: an expected "Jonh" where the
    needle names "John". A word the needle lacks becomes the needle word closest to it (same first letter, at least
    3 letters in 4 alike), if there is one."""
    if needle is None:
        return value
    spelt = {w.casefold(): w for w in _TOKEN.findall(needle)}

    def respell(match: re.Match[str]) -> str:
        word = match.group()
        folded = word.casefold()
        if len(word) < 3 or folded in spelt or not freetext.content(word):
            return word
        alike = [w for w in spelt if w[0] == folded[0]]  # the same first letter
        close = difflib.get_close_matches(folded, alike, n=1, cutoff=0.75)
        return spelt[close[0]] if close else word

    return _TOKEN.sub(respell, value)


@lru_cache(maxsize=4096)
def _key(value: str, asked: frozenset[str]) -> tuple[str, ...]:
    """The words of an expected answer that carry it: those not already in the question (all, if that leaves none)."""
    stems = tuple(dict.fromkeys(freetext.content(value)))
    return tuple(s for s in stems if s not in asked) or stems


def _given(reading: freetext.Reading, value: str, asked: frozenset[str]) -> float:
    """How much of ``value``'s key the answer gives, outside quotes or in quotes of the needle (unchecked quotes
    count when there is no needle). All of a short key is needed; most of a long one."""
    key = _key(value, asked)
    if not key:
        return 0.0
    said = set(reading.stems)
    for quote in reading.quotes:
        if quote.grounded is not False:
            said |= set(freetext.content(quote.text))
    for clause in reading.clauses:
        if clause.not_there:  # "the cause is not mentioned": what it names is not given
            said -= clause.stems - {s for c in reading.clauses if not c.not_there for s in c.stems}
    if any(freetext.is_number(s) and s not in said for s in key):
        return min(sum(1 for s in key if s in said) / len(key), 0.5)  # a number is never paraphrased away
    light = freetext.common_stems()
    heavy = [s for s in key if s not in light] or key
    found = sum(1 for s in heavy if s in said)
    needed = len(heavy) if len(heavy) <= 2 else max(2, -(-3 * len(heavy) // 4))
    return 1.0 if found >= needed else found / len(heavy)


def share_given(answer: str, values: Sequence[str], question: str | None, needle: str | None) -> float:
    """The share of ``values`` the answer gives (each as the default cascade reads it): RULER's partial credit."""
    if not values:
        return 0.0
    reading = freetext.read(answer, needle)
    asked = freetext.stems_of(question)
    return round(sum(_given(reading, v, asked) == 1.0 for v in values) / len(values), 4)


def _atomic(value: str, asked: frozenset[str]) -> bool:
    """A value that is a number, or one or two words: it cannot be paraphrased much."""
    key = _key(value, asked)
    return len(key) <= 2 or all(freetext.is_number(s) for s in key)


def _numbers_verdict(
    reading: freetext.Reading, values: tuple[str, ...], asked: frozenset[str], share: float
) -> Verdict | None:
    """Fail an answer that gives other numbers where the expected answer has them: '47 crates' for 49."""
    wanted = {s for v in values for s in _key(v, asked) if freetext.is_number(s)}
    wrong = {s for s in reading.stems if freetext.is_number(s)} - asked - wanted
    if not wanted or not wrong:
        return None
    if reading.hedged_near(wanted | wrong):
        return _undecided("conflicting-value", "hedges between numbers")
    missing = sorted(wanted - reading.stems)
    return _fail("conflicting-value", f"gives {', '.join(sorted(wrong)[:3])}, not {', '.join(missing[:3])}", share)


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_UUID_PART = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{0,4}", re.IGNORECASE)


def _uuid(answer: str, value: str) -> Verdict:
    """A uuid is given as it is or not at all: another uuid in its place is a wrong one."""
    given = {u.casefold() for u in _UUID.findall(answer)}
    if value.casefold() in given:
        if len(given) > 1:
            return _undecided("conflicting-value", "gives the expected uuid among others")
        return _pass("key-words", "gives the expected uuid")
    if given:
        return _fail("conflicting-value", "gives another uuid")
    if _UUID_PART.search(answer):  # "45cf9b83-7471-407f-a3a4-": cut off by the token limit, or garbled
        return _fail("conflicting-value", "gives an incomplete uuid")
    return _undecided("no-key-words", "gives no uuid")


_NAME = re.compile(r"\b[A-Z][a-z]+(?:[-'][A-Za-z]+)?\b")


def _other_names(answer: str, values: tuple[str, ...], question: str | None, needle: str | None) -> list[str]:
    """Where every expected value is a name (each of its content words capitalised: "Elena Frost", "Genoa"), the
    names the answer gives instead: capitalised words that are not in the question, the expected answer or the
    needle (a name the needle gives may be the one meant, spelt otherwise: "Jonh" expected, "John" in the needle), and
    are not common words."""
    for value in values:
        words = [w for w in _TOKEN.findall(value) if freetext.content(w)]
        if not words or not all(w[0].isupper() for w in words):
            return []
    said = " ".join((question or "", needle or "", *values))
    known = {w.casefold() for w in _TOKEN.findall(said)}
    light = freetext.common_stems()
    names = []
    for match in _NAME.finditer(freetext.clean(answer)):
        word = match.group().casefold()
        if word in known or not freetext.content(word) or freetext.stem(word) in light:
            continue
        names.append(match.group())
    return list(dict.fromkeys(names))


def _checked_pass(
    reading: freetext.Reading,
    values: tuple[str, ...],
    asked: frozenset[str],
    needle: frozenset[str] | None,
    denies: bool,
    echo: frozenset[str],
) -> Verdict:
    """The answer gives the expected one; pass unless something casts doubt on it. ``echo``: the words of a
    question that holds a negation ("What does not make sense?"), whose negation an answer may repeat."""
    key = {s for v in values for s in _key(v, asked)}
    carrying = [c for c in reading.clauses if c.stems & key]
    if reading.hedged_near(key) or (not carrying and any(c.hedged for c in reading.clauses)):
        return _undecided("key-words", "hedges")
    negates = any(_negates(c, key, echo) for c in carrying)
    if not denies and negates != any(freetext.negated(v) for v in values):
        return _undecided("key-words", "differs from the expected answer in negation")  # "He paid" / "He did not pay"
    if reading.ungrounded_quotes:
        return _undecided("key-words", "quotes text that is not in the needle")
    if any(freetext.is_number(s) for s in reading.stems - key - asked - (needle or set())):
        return _undecided("key-words", "gives other numbers too")  # "17:00" for "Day 17"
    if needle is not None:
        foreign = reading.stems - needle - asked - key
        if len(foreign) >= 6 and len(foreign) > len(reading.stems & needle):
            return _undecided("key-words", "says much that is not in the needle")
    return _pass("key-words", "gives the expected answer")


def _negates(clause: freetext.Clause, key: set[str], echo: frozenset[str]) -> bool:
    """Whether a clause that gives the answer negates it: a negation before its last key word ("he did not pay";
    not "vain, because they are not practical"), other than the question's own ("does not make sense", ``echo``)."""
    if not clause.negated:
        return False
    tokens = freetext.words(clause.text)
    last = max((i for i, t in enumerate(tokens) if freetext.stem(t) in key), default=len(tokens))
    for i, token in enumerate(tokens[:last]):
        if freetext.is_negation(token):
            after = next((freetext.stem(w) for w in tokens[i + 1 :] if freetext.content(w)), None)
            if after is None or after not in echo:
                return True
    return False


def _polarity(value: str) -> str | None:
    """'yes' or 'no' when an expected answer is one, however it continues ("No, he flouts them")."""
    first = " ".join(value.casefold().split())
    if freetext.YES.match(first):
        return "yes"
    if freetext.NO.match(first):
        return "no"
    return None


def _polar(reading: freetext.Reading, polar: str, asked: frozenset[str]) -> Verdict:
    stance = reading.stance() or _restated(reading, asked)
    if stance is None:
        return _undecided("polar", "does not open with yes or no")
    if any(c.not_there for c in reading.clauses):  # "No, the text does not say": a "not found", not an answer
        return _undecided("polar", f"answers {stance}, but says the text lacks something")
    if stance != polar:
        return _fail("polar", f"answers {stance} where the answer is {polar}")
    if any(c.hedged for c in reading.clauses):
        return _undecided("polar", "hedges")
    if reading.ungrounded_quotes:
        return _undecided("polar", "quotes text that is not in the needle")
    return _pass("polar", f"answers {polar}")


def _restated(reading: freetext.Reading, asked: frozenset[str]) -> str | None:
    """The stance of an answer that opens by restating the question as a statement: its opening clauses hold every
    content word of the question, with at most two others among them. A negation before the last of them makes it
    a no ("X does not always do Y"); one after it ("she complained, because she would never...") does not."""
    if not asked or not reading.sentences:
        return None
    tokens: list[str] = []
    for clause in reading.sentences[0].clauses:
        tokens += freetext.words(clause.text)
        stems = [freetext.stem(t) for t in tokens]
        if asked <= set(stems):
            where = [i for i, s in enumerate(stems) if s in asked]
            between = set(freetext.content(" ".join(tokens[where[0] : where[-1]]))) - asked
            if len(between) > 2:  # "X dismisses and flouts them, making it hard to do Y": not a restatement
                return None
            return "no" if any(freetext.is_negation(t) for t in tokens[: where[-1]]) else "yes"
    return None


AUTO = BuiltIn(
    "auto",
    "mean_score",
    true_or(
        "The default cascade for free-text answers (what nspec uses when `scoring` is not given): passes an answer "
        "that gives the expected answer's key words (paraphrases and number words included) and fails one that says "
        "the context lacks the answer, answers yes for no, gives other numbers, or answers with something that is "
        "not in the needle; hedged answers, quotes that are not in the needle, and anything in between stay "
        "undecided for judges. See docs/scoring.md.",
        not_found={
            "description": "Phrases that also mean 'not found' (besides the ways models say it, built in), e.g. "
            "UNANSWERABLE when the prompt asks for it.",
            **NOT_FOUND,
        },
    ),
    _auto,
)
