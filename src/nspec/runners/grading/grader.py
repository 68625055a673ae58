"""Grading one answer: `grade()` (also `nspec.grade`), the spec's scorers, and the default cascade `auto`.

`nspec score` grades every cell through `scorer_verdicts`, the function `grade()` is built on, so an answer graded in
a notebook and the same answer in a run always get the same verdict.

A scorer is `(answer, GradeInput, options) -> Verdict`: it sees the cell's expected answers, alternates, question,
needle and its task family's data, and returns a verdict with a score in [0, 1] (continuous where its metric is:
RULER's `string_match_all` gives the share found) and a pass at its threshold.

Accepted answers are alternatives, each a tuple of values that must all be given: `("Paris",), ("the capital",)`
accepts either; `("111", "222")` needs both (a multi-value cell). An empty set of alternatives means the context
does not hold the answer (a negative control): the right reply says so and invents nothing.
"""

from __future__ import annotations

import difflib
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from nspec.errors import UserError
from nspec.templates import regex_error

from . import freetext, ruler

Accepted = tuple[tuple[str, ...], ...]
Outcome = Literal["pass", "fail", "undecided"]
DEFAULT_SCORING: tuple[dict[str, Any], ...] = ({"auto": True},)
_VALUE = re.compile(r"\d{3,}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")
_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


@dataclass(frozen=True)
class Verdict:
    """One grader's decision on one answer.

    ``verdict`` is "pass", "fail" or "undecided" (a judge should look); ``scorer`` names the scorer that decided;
    ``reason`` says why in a few words; ``score`` is 1 for a pass, 0 for a fail, the share of expected answers
    found for multi-value answers, and None while undecided. ``rule`` names the step of the scorer that gave the
    verdict (`auto` and `negative`: see docs/scoring.md, where each rule's measured precision is), for tables.
    """

    verdict: Outcome
    scorer: str
    reason: str
    score: float | None = None
    rule: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "scorer": self.scorer,
            "rule": self.rule or self.scorer,
            "verdict": self.verdict,
            "reason": self.reason,
            "score": self.score,
        }


@dataclass(frozen=True)
class GradeInput:
    """What a scorer sees of one cell: its expected answers (all of them required where there are several), other
    accepted answers, the question, the text of the needle it is about, and its task family's data."""

    expected: tuple[str, ...]
    alternates: tuple[str, ...] = ()
    question: str | None = None
    needle: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, cell: Mapping[str, Any]) -> GradeInput:
        """A cell of cells.jsonl, as its scorers see it."""
        return cls(
            tuple(cell["expected"]),
            tuple(cell.get("alternates", [])),
            cell.get("question"),
            needle_text(cell),
            cell.get("data", {}),
        )

    @property
    def accepted(self) -> Accepted:
        """The accepted answers: the expected answer or any alternate; every value when it expects several (a
        multi-value or multi-query cell, whose alternates belong to single needles and are shown to judges only)."""
        if len(self.expected) > 1:
            return (self.expected,)
        return tuple((a,) for a in dict.fromkeys((*self.expected, *self.alternates)))


Scorer = Callable[[str, GradeInput, Any], Verdict]


def grade(
    answer: str,
    *,
    expected: Sequence[str],
    question: str | None = None,
    needle: str | None = None,
    scoring: Sequence[Mapping[str, Any]] | None = None,
    require: Literal["any", "all"] = "any",
    data: Mapping[str, Any] | None = None,
) -> Verdict:
    """Grade one answer exactly as ``nspec score`` would.

    - ``expected``: the accepted answers; an empty list means the context holds no answer (a negative control), so
      the right reply says the answer is not there and invents no value.
    - ``question``: the question asked; its words are not taken as evidence that the answer is right.
    - ``needle``: the text of the needle or stack item the question is about; quotes in the answer are checked
      against it, and an answer about something else is told apart from a paraphrase.
    - ``scoring``: a spec's `scoring` list (e.g. ``[{"number": True}, {"auto": True}]``); None is the default
      cascade, ``[{"auto": True}]``. The first scorer that decides gives the verdict. A `judge` entry is skipped:
      grading here never calls a model, so what a run would send to judges comes back "undecided".
    - ``require="all"``: every expected answer must be given (a multi-value question); the score is the share given.
    - ``data``: the cell's task-family data, for scorers that read it.

    >>> grade("By composing a morose epicedium.", expected=["He composed an epicedium"],
    ...       question="What did the bard do?").verdict
    'pass'
    """
    if isinstance(expected, str):
        raise UserError("expected must be a list of accepted answers, e.g. expected=['Paris']")
    values = tuple(str(e) for e in expected)
    given = values if require == "all" else values[:1]
    inp = GradeInput(given, () if require == "all" else values[1:], question, needle, data or {})
    return decide(scorer_verdicts(answer, inp, scoring))


def needle_text(cell: Mapping[str, Any]) -> str | None:
    """The text of the needles (or stack item) the question is about."""
    texts = [n["text"] for n in cell.get("needles", []) if n.get("role") == "target" and "text" in n]
    return "\n".join(dict.fromkeys(texts)) or None


def decide(verdicts: Sequence[Verdict]) -> Verdict:
    """The first decisive verdict; else the first scorer's undecided one."""
    for verdict in verdicts:
        if verdict.verdict != "undecided":
            return verdict
    return verdicts[0] if verdicts else Verdict("undecided", "none", "no scorer")


def scorer_verdicts(answer: str, inp: GradeInput, scoring: Sequence[Mapping[str, Any]] | None) -> list[Verdict]:
    """Every scorer's verdict, in the order of ``scoring`` (judges excluded); one verdict for a negative control."""
    entries = [dict(e) for e in (DEFAULT_SCORING if scoring is None else scoring)]
    check_scoring(entries)
    if not inp.accepted:
        return [negative(answer, inp.question, _not_found_phrases(entries))]
    out = []
    for entry in entries:
        ((kind, options),) = entry.items()
        if kind != "judge":
            out.append(SCORERS[kind](answer, inp, options))
    return out


def check_scoring(entries: Sequence[Mapping[str, Any]]) -> None:
    """Refuse a scoring list nspec cannot grade with (what `nspec validate` reports in a spec, for API callers)."""
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or len(entry) != 1:
            raise UserError(f"scoring[{i}] must be a mapping with exactly one key, the scorer's kind")
        ((kind, options),) = entry.items()
        if kind != "judge" and kind not in SCORERS:
            raise UserError(f"scoring[{i}]: unknown scorer {kind!r}; one of {', '.join(sorted(SCORERS))}, judge")
        if kind == "regex":
            pattern = options if isinstance(options, str) else (options or {}).get("pattern")
            if regex_error(pattern) is not None:
                raise UserError(f"scoring[{i}].regex: {regex_error(pattern)}")


# -- the scorers a spec names --------------------------------------------------------------------------------------


def normalize(text: str, options: Mapping[str, Any] | None) -> str:
    o = {"case": True, "whitespace": True, "punctuation": False, "numbers": True, **(options or {})}
    if o["numbers"]:
        text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    if o["case"]:
        text = text.casefold()
    if o["punctuation"]:
        text = text.translate(_PUNCT)
    if o["whitespace"]:
        text = " ".join(text.split())
    return text


def found_in(value: str, text: str) -> bool:
    """Whether ``value`` occurs in ``text`` as whole words: "No" is not found in "Nothing", 42 not in 1423."""
    if not value:
        return False
    start = r"(?<!\w)" if value[0].isalnum() or value[0] == "_" else ""
    end = r"(?!\w)" if value[-1].isalnum() or value[-1] == "_" else ""
    return re.search(start + re.escape(value) + end, text) is not None


def _options(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {"value": value} if isinstance(value, str) else {}


def _best_share(accepted: Accepted, hit: Callable[[str], bool]) -> tuple[float, int, int]:
    """The largest share of one alternative's values that ``hit``, with (found, of)."""
    best = (0.0, 0, max((len(a) for a in accepted), default=0))
    for alternative in accepted:
        found = sum(1 for value in alternative if hit(value))
        share = found / len(alternative)
        if share > best[0] or (share == best[0] and len(alternative) < best[2]):
            best = (share, found, len(alternative))
    return best


def _text_match(kind: str) -> Callable[..., Verdict]:
    def scorer(answer: str, inp: GradeInput, spec: Any) -> Verdict:
        accepted = inp.accepted
        opts = _options(spec)
        norm, template = opts.get("normalize"), opts.get("value", "{answer}")
        got = normalize(answer, norm)

        def wanted(value: str) -> str:
            return normalize(template.replace("{answer}", value), norm)

        if kind == "exact":
            hit = any(len(a) == 1 and got == wanted(a[0]) for a in accepted)
            if hit:
                return Verdict("pass", kind, "equals an accepted answer", 1.0)
            return Verdict("undecided", kind, "the answer is not exactly an accepted one")
        share, found, of = _best_share(accepted, lambda v: found_in(wanted(v), got))
        if kind == "contains":
            ok = share == 1.0
            return Verdict("pass" if ok else "fail", kind, f"contains {found} of {of} expected", 1.0 if ok else 0.0)
        ok = share >= float(opts.get("threshold", 1.0))
        return Verdict("pass" if ok else "fail", kind, f"found {found} of {of}", share)

    return scorer


def _regex(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    accepted = inp.accepted
    pattern = spec if isinstance(spec, str) else spec["pattern"]
    flags = re.IGNORECASE if (not isinstance(spec, dict) or spec.get("ignore_case", True)) else 0
    if "{answer}" in pattern:
        share, _, _ = _best_share(
            accepted, lambda v: re.search(pattern.replace("{answer}", re.escape(v)), answer, flags) is not None
        )
        ok = share == 1.0
    else:
        ok = re.search(pattern, answer, flags) is not None
    return Verdict(
        "pass" if ok else "fail",
        "regex",
        "the pattern matches" if ok else "the pattern does not match",
        1.0 if ok else 0.0,
    )


def _number(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    accepted = inp.accepted
    tolerance = float(_options(spec).get("tolerance", 0))
    numbers = [float(n.replace(",", "")) for n in _NUMBER.findall(answer)]
    targets: list[list[float]] = []
    for alternative in accepted:
        try:
            targets.append([float(v.replace(",", "")) for v in alternative])
        except ValueError:
            continue
    if not targets:
        return Verdict("undecided", "number", "no accepted answer is a number")
    if not numbers:
        return Verdict("undecided", "number", "the answer holds no number")
    ok = any(all(any(abs(n - t) <= tolerance for n in numbers) for t in alt) for alt in targets)
    return Verdict(
        "pass" if ok else "fail",
        "number",
        "the expected number is there" if ok else f"numbers {numbers[:5]} do not include the expected",
        1.0 if ok else 0.0,
    )


def _rails(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    accepted = inp.accepted
    opts = _options(spec)
    norm = opts.get("normalize")
    got = normalize(answer, norm)
    has_answer = _best_share(accepted, lambda v: found_in(normalize(v, norm), got))[0] == 1.0
    not_found = says_not_found(answer, tuple(opts.get("not_found", ())))
    if has_answer and not not_found:
        return Verdict("pass", "rails", "snaps to the expected answer", 1.0)
    if not_found and not has_answer:
        return Verdict("fail", "rails", "snaps to 'not found'", 0.0)
    return Verdict("undecided", "rails", "unparsable: snaps to both or neither")


def says_not_found(answer: str, phrases: Sequence[str]) -> bool:
    """Whether the answer says the context lacks the answer: one of ``phrases`` (the spec's, e.g. UNANSWERABLE), or
    one of the ways models say it ("the text does not mention...", "I could not find...")."""
    text = normalize(answer, None)
    if any(found_in(normalize(p, None), text) for p in phrases):
        return True
    return any(c.not_there for c in freetext.read(answer, None).clauses)


def _not_found_phrases(entries: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    phrases: list[str] = []
    for entry in entries:
        for kind in ("rails", "auto"):
            options = entry.get(kind)
            if isinstance(options, Mapping):
                phrases += options.get("not_found", ())
    return tuple(phrases)


def negative(answer: str, question: str | None, phrases: Sequence[str]) -> Verdict:
    """A negative control is right only if it says the answer is not there and invents no value."""
    asked = set(_VALUE.findall(question or ""))
    not_found = says_not_found(answer, phrases)
    invented = any(v not in asked for v in _VALUE.findall(freetext.clean(answer)))
    if not_found and not invented:
        return Verdict("pass", "negative", "says not found and invents nothing", 1.0, "negative.not-found")
    if invented and not not_found:
        return Verdict("fail", "negative", "invents a value", 0.0, "negative.invents-value")
    if not not_found:
        return Verdict("fail", "negative", "does not say the answer is missing", 0.0, "negative.answers")
    return Verdict("undecided", "negative", "says not found but also gives a value", None, "negative.both")


# -- the default cascade -------------------------------------------------------------------------------------------
#
# Each rule decides only where its precision, measured on real model answers labelled by hand
# (tests/data/grading/answers.jsonl, `python bench/grading.py`), is at least 99%; elsewhere it says "undecided" and
# the judges decide. A fail needs positive evidence: a refusal, a "not found" where the needle is there, a
# conflicting value of the expected kind (another number, uuid or name), or the opposite yes/no. That an answer's
# words differ from the needle's is never evidence: a correct paraphrase looks just like that.


def _plain(text: str) -> str:
    return " ".join(_ARTICLES.sub(" ", normalize(text, {"punctuation": True})).split())


# Rules that have decided no labelled real answer yet (tests/data/grading/answers.jsonl): their precision is not
# known, so what they find is said but not decided, and the judges decide. tests/test_grading_accuracy.py fails when
# the set gives one of them answers to decide (measure it, then take it out) or a rule outside it has none.
UNMEASURED = frozenset({"refusal", "not-found", "multi-value"})


def _auto(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    """The default cascade for free-text answers: decide what a careful judge would decide the same way, and say
    "undecided" otherwise. See docs/scoring.md for each rule and its measured precision."""
    verdict = cascade(answer, inp)
    if verdict.verdict != "undecided" and verdict.rule in UNMEASURED:
        reason = f"{verdict.reason} (a rule not yet measured on real answers: the judges decide)"
        return Verdict("undecided", verdict.scorer, reason, None, verdict.rule)
    return verdict


def cascade(answer: str, inp: GradeInput) -> Verdict:
    """The cascade's own verdict, before the rules not yet measured are held back (`UNMEASURED`)."""
    accepted, question, needle = inp.accepted, inp.question, inp.needle
    reading = freetext.read(answer, needle)
    if not freetext.words(answer):
        return _fail("empty", "the answer is empty")
    plain = _plain(answer)
    if any(len(a) == 1 and plain == _plain(a[0]) for a in accepted):
        return _pass("equals", "equals an accepted answer")
    asked = set(freetext.content(question)) if question else set()
    verdicts = [_one_alternative(answer, reading, alt, asked, question, needle) for alt in accepted]
    passing = [v for v in verdicts if v.verdict == "pass"]
    if passing:
        return max(passing, key=lambda v: v.score or 0.0)
    if all(v.verdict == "fail" for v in verdicts):
        return max(verdicts, key=lambda v: v.score or 0.0)
    return next(v for v in verdicts if v.verdict == "undecided")


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
    asked: set[str],
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
        return _checked_pass(reading, values, asked, None if needle is None else set(freetext.content(needle)), denies)
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


def _spelled_as_in_needle(value: str, needle: str | None) -> str:
    """An expected answer with its misspelt words spelt as the needle spells them: NIAN expects "Jaun" where its
    limerick names "Juan". A word the needle lacks becomes the needle word closest to it (same first letter, at least
    3 letters in 4 alike), if there is one."""
    if needle is None:
        return value
    spelt = {w.casefold(): w for w in _TOKEN.findall(needle)}

    def respell(match: re.Match[str]) -> str:
        word = match.group()
        if len(word) < 3 or word.casefold() in spelt or not freetext.content(word):
            return word
        close = difflib.get_close_matches(word.casefold(), list(spelt), n=1, cutoff=0.75)
        return spelt[close[0]] if close and close[0][0] == word[0].casefold() else word

    return _TOKEN.sub(respell, value)


def _key(value: str, asked: set[str]) -> list[str]:
    """The words of an expected answer that carry it: those not already in the question (all, if that leaves none)."""
    stems = list(dict.fromkeys(freetext.content(value)))
    return [s for s in stems if s not in asked] or stems


def _given(reading: freetext.Reading, value: str, asked: set[str]) -> float:
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
    asked = set(freetext.content(question)) if question else set()
    return round(sum(_given(reading, v, asked) == 1.0 for v in values) / len(values), 4)


def _atomic(value: str, asked: set[str]) -> bool:
    """A value that is a number, or one or two words: it cannot be paraphrased much."""
    key = _key(value, asked)
    return len(key) <= 2 or all(freetext.is_number(s) for s in key)


def _numbers_verdict(
    reading: freetext.Reading, values: tuple[str, ...], asked: set[str], share: float
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
        return _pass("uuid", "gives the expected uuid")
    if given:
        return _fail("conflicting-value", "gives another uuid")
    if _UUID_PART.search(answer):  # "45cf9b83-7471-407f-a3a4-": cut off by the token limit, or garbled
        return _fail("conflicting-value", "gives an incomplete uuid")
    return _undecided("no-key-words", "gives no uuid")


_NAME = re.compile(r"\b[A-Z][a-z]+(?:[-'][A-Za-z]+)?\b")


def _other_names(answer: str, values: tuple[str, ...], question: str | None, needle: str | None) -> list[str]:
    """Where every expected value is a name (each of its content words capitalised: "Elena Frost", "Genoa"), the
    names the answer gives instead: capitalised words that are not in the question, the expected answer or the
    needle (a name the needle gives may be the one meant: NIAN expects "Jaun" where its limerick says "Juan"), and
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
    reading: freetext.Reading, values: tuple[str, ...], asked: set[str], needle: set[str] | None, denies: bool
) -> Verdict:
    """The answer gives the expected one; pass unless something casts doubt on it."""
    key = {s for v in values for s in _key(v, asked)}
    carrying = [c for c in reading.clauses if c.stems & key]
    if reading.hedged_near(key) or (not carrying and any(c.hedged for c in reading.clauses)):
        return _undecided("key-words", "hedges")
    if not denies and any(c.negated for c in carrying) != any(freetext.negated(v) for v in values):
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


def _polarity(value: str) -> str | None:
    """'yes' or 'no' when an expected answer is one, however it continues ("No, he flouts them")."""
    first = " ".join(value.casefold().split())
    if freetext.YES.match(first):
        return "yes"
    if freetext.NO.match(first):
        return "no"
    return None


def _polar(reading: freetext.Reading, polar: str, asked: set[str]) -> Verdict:
    stance = reading.stance() or _restated(reading, asked)
    if stance is None:
        return _undecided("polar", "does not open with yes or no")
    if any(c.not_there for c in reading.clauses):  # "No, the text does not say": a "not found", not an answer
        return _undecided("polar", f"answers {stance}, but says the text lacks something")
    if stance != polar:
        return _fail("polar", f"answers {stance} where the answer is {polar}")
    if any(c.hedged for c in reading.clauses):
        return _undecided("polar", "hedges")
    return _pass("polar", f"answers {polar}")


def _restated(reading: freetext.Reading, asked: set[str]) -> str | None:
    """The stance of an answer that opens by restating the question as a statement, adding at most two words: "Mr.
    Thistle does not follow our rules." is a no, "She complained when the door squeezed her flat." a yes."""
    if not asked or not reading.sentences:
        return None
    clauses: list[freetext.Clause] = []
    for sentence in reading.sentences:  # the first sentence, with what follows an abbreviation ("Mr. Thistle")
        clauses += sentence.clauses
        if len(sentence.text.split()) > 2:
            break
    stems = {s for c in clauses for s in c.stems}
    if not asked <= stems or len(stems - asked) > 2:  # a restatement, not "…, because she'd never leave Portugal"
        return None
    return "no" if any(c.negated for c in clauses) else "yes"


# -- RULER's metrics, per answer (`grading.ruler`: NVIDIA/RULER's own definitions) ------------------------------


def _string_match_all(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    """RULER's `string_match_all`: the share of the expected strings the answer holds (case-insensitive
    substrings, after RULER's cleaning); a pass when all are there (or the share reaches `threshold`)."""
    score = ruler.share_found(ruler.postprocess(answer), inp.expected)
    ok = score >= float(_options(spec).get("threshold", 1.0))
    found = round(score * len(inp.expected))
    return Verdict("pass" if ok else "fail", "string_match_all", f"holds {found} of {len(inp.expected)}", score)


def _string_match_part(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    """RULER's `string_match_part` (its QA metric): 1 when the answer holds any of the references (the expected
    answers and alternates, case-insensitive substrings), else 0."""
    references = list(dict.fromkeys((*inp.expected, *inp.alternates)))
    score = ruler.any_found(ruler.postprocess(answer), references)
    reason = "holds a reference answer" if score else f"holds none of {len(references)} reference answers"
    return Verdict("pass" if score else "fail", "string_match_part", reason, score)


# -- OpenAI's GraphWalks and MRCR graders (their dataset cards on Hugging Face: openai/graphwalks, openai/mrcr) -------

_FINAL_ANSWER = re.compile(r"Final Answer:\s*\[([^\[\]\n]*)\]")


def final_answer(text: str) -> list[str] | None:
    """The nodes of the last `Final Answer: [a, b, ...]` list in ``text`` (comma-separated, each stripped, empty
    ones dropped); None when there is none."""
    found = _FINAL_ANSWER.findall(text)
    if not found:
        return None
    return [item.strip() for item in found[-1].split(",") if item.strip()]


def _set_f1(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    """GraphWalks' grade: F1 between the set of nodes the reply's last `Final Answer:` list names and the expected
    set (the cell's `data.nodes`, else the expected answer's own list). As OpenAI's grader: recall and precision are
    0 when their set is empty, so an empty expected set scores 0 whatever the reply."""
    gold = inp.data.get("nodes")
    if gold is None:  # graded outside a run: the expected answer's own list, or the expected answers as nodes
        listed = final_answer(inp.expected[0])
        gold = listed if listed is not None else inp.expected
    truth = set(gold)
    given = final_answer(answer)
    if given is None:
        return Verdict("fail", "set_f1", "no `Final Answer: [...]` list", 0.0)
    sampled = set(given)
    overlap = len(sampled & truth)
    recall = overlap / len(truth) if truth else 0.0
    precision = overlap / len(sampled) if sampled else 0.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    ok = f1 >= float(_options(spec).get("threshold", 1.0))
    reason = f"{overlap} of {len(truth)} expected nodes among {len(sampled)} given"
    return Verdict("pass" if ok else "fail", "set_f1", reason, round(f1, 6))


def _sequence_ratio(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    """MRCR's grade: 0 unless the reply starts with the cell's random string (`data.prefix`); else difflib's
    SequenceMatcher ratio between the reply and the expected answer, the string stripped from both."""
    prefix = str(inp.data.get("prefix", ""))
    expected = inp.expected[0]
    if not answer.startswith(prefix):
        return Verdict("fail", "sequence_ratio", "does not start with the string to prepend", 0.0)
    ratio = difflib.SequenceMatcher(None, answer.removeprefix(prefix), expected.removeprefix(prefix)).ratio()
    ok = ratio >= float(_options(spec).get("threshold", 1.0))
    return Verdict("pass" if ok else "fail", "sequence_ratio", f"similarity {ratio:.3f}", round(ratio, 6))


def _ruler(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    """RULER's metric of the cell's task, as the `ruler` family names it in the cell's data (`data.metric`)."""
    metric = inp.data.get("metric")
    if metric not in RULER_METRICS:
        return Verdict("undecided", "ruler", "the cell names no RULER metric (not a `ruler` task's cell)")
    return RULER_METRICS[metric](answer, inp, spec)


RULER_METRICS: dict[str, Scorer] = {"string_match_all": _string_match_all, "string_match_part": _string_match_part}

SCORERS: dict[str, Scorer] = {
    "contains": _text_match("contains"),
    "exact": _text_match("exact"),
    "all_of": _text_match("all_of"),
    "regex": _regex,
    "number": _number,
    "rails": _rails,
    "auto": _auto,
    "string_match_all": _string_match_all,
    "string_match_part": _string_match_part,
    "set_f1": _set_f1,
    "sequence_ratio": _sequence_ratio,
    "ruler": _ruler,
}
