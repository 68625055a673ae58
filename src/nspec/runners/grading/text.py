"""The text scorers a spec names: `contains`, `exact`, `all_of`, `regex`, `number` and `rails`, each with its options
schema and the checks its schema cannot make; and what they share with the cascade and negative controls
(`normalize`, `found_in`, `says_not_found`)."""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from nspec.scorers import Accepted, GradeInput, Problem, Verdict
from nspec.templates import TemplateError, placeholders, regex_error

from . import freetext
from .builtin import BuiltIn, options_of, threshold, true_or

_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")
_PUNCT = str.maketrans("", "", string.punctuation)


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


def says_not_found(answer: str, phrases: Sequence[str]) -> bool:
    """Whether the answer says the context lacks the answer: one of ``phrases`` (the spec's, e.g. UNANSWERABLE), or
    one of the ways models say it ("the text does not mention...", "I could not find...")."""
    text = normalize(answer, None)
    if any(found_in(normalize(p, None), text) for p in phrases):
        return True
    return any(c.not_there for c in freetext.read(answer, None).clauses)


def _best_share(accepted: Accepted, hit: Callable[[str], bool]) -> tuple[float, int, int]:
    """The largest share of one alternative's values that ``hit``, with (found, of)."""
    best = (0.0, 0, max((len(a) for a in accepted), default=0))
    for alternative in accepted:
        found = sum(1 for value in alternative if hit(value))
        share = found / len(alternative)
        if share > best[0] or (share == best[0] and len(alternative) < best[2]):
            best = (share, found, len(alternative))
    return best


def _text_match(kind: str) -> Callable[[str, GradeInput, Any], Verdict]:
    def scorer(answer: str, inp: GradeInput, spec: Any) -> Verdict:
        accepted = inp.accepted
        opts = options_of(spec)
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


def _template_check(kind: str) -> Callable[[Any], Iterator[Problem]]:
    """The check of a scorer whose options are a template: parsable, with no placeholder but {answer}."""

    def check(options: Any) -> Iterator[Problem]:
        where: tuple[str, ...] = ("value",) if isinstance(options, dict) else ()
        text = options.get("value") if isinstance(options, dict) else options
        if not isinstance(text, str):
            return
        try:
            found = placeholders(text)
        except TemplateError as exc:
            yield where, str(exc)
            return
        for name in sorted(set(found) - {"answer"}):
            yield where, f"unknown placeholder {{{name}}}; `{kind}` may use {{answer}}"

    return check


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


def _regex_check(options: Any) -> Iterator[Problem]:
    where: tuple[str, ...] = ("pattern",) if isinstance(options, dict) else ()
    problem = regex_error(options.get("pattern") if isinstance(options, dict) else options)
    if problem is not None:
        yield where, problem


def _number(answer: str, inp: GradeInput, spec: Any) -> Verdict:
    accepted = inp.accepted
    tolerance = float(options_of(spec).get("tolerance", 0))
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
    opts = options_of(spec)
    norm = opts.get("normalize")
    got = normalize(answer, norm)
    has_answer = _best_share(accepted, lambda v: found_in(normalize(v, norm), got))[0] == 1.0
    not_found = says_not_found(answer, tuple(opts.get("not_found", ())))
    if has_answer and not not_found:
        return Verdict("pass", "rails", "snaps to the expected answer", 1.0)
    if not_found and not has_answer:
        return Verdict("fail", "rails", "snaps to 'not found'", 0.0)
    return Verdict("undecided", "rails", "unparsable: snaps to both or neither")


# -- their options ---------------------------------------------------------------------------------------------------

TEMPLATE = {"description": "Text with {placeholders}; write {{ and }} for literal braces.", "type": "string"}
VALUE = {"description": "What to look for; {answer} is each expected answer.", "type": "string", "default": "{answer}"}
NORMALIZE = {
    "description": "How answers and expected values are normalised before comparing.",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "case": {"description": "Ignore upper/lower case.", "type": "boolean", "default": True},
        "whitespace": {
            "description": "Treat any run of white space as one space and ignore it at the ends.",
            "type": "boolean",
            "default": True,
        },
        "punctuation": {"description": "Ignore punctuation.", "type": "boolean", "default": False},
        "numbers": {
            "description": "Ignore thousands separators in numbers (1,234,567 = 1234567).",
            "type": "boolean",
            "default": True,
        },
    },
}
NOT_FOUND = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}


def _template_or(description: str, **properties: Mapping[str, Any]) -> dict[str, Any]:
    """The options schema of a scorer written as a template, or with a mapping of ``properties``."""
    given = {"type": "object", "additionalProperties": False, "properties": {"value": VALUE, **properties}}
    return {"description": description, "oneOf": [TEMPLATE, given]}


CONTAINS = BuiltIn(
    "contains",
    "pass_rate",
    _template_or(
        'Pass if the answer contains every expected answer (a template, default "{answer}"), else fail.',
        normalize=NORMALIZE,
    ),
    _text_match("contains"),
    _template_check("contains"),
)
EXACT = BuiltIn(
    "exact",
    "pass_rate",
    _template_or(
        "Pass if the whole answer equals an expected answer after normalisation, else undecided (a longer answer may "
        "still be right).",
        normalize=NORMALIZE,
    ),
    _text_match("exact"),
    _template_check("exact"),
)
ALL_OF = BuiltIn(
    "all_of",
    "share_found",
    _template_or(
        'RULER\'s score: the share of expected answers found in the answer (a template, default "{answer}"). Pass '
        "if the share reaches `threshold`.",
        threshold=threshold("Share of expected answers needed to pass."),
        normalize=NORMALIZE,
    ),
    _text_match("all_of"),
    _template_check("all_of"),
)
REGEX = BuiltIn(
    "regex",
    "pass_rate",
    {
        "description": "Pass if the pattern matches the answer, else fail. {answer} in the pattern is the expected "
        "answer, regex-escaped.",
        "oneOf": [
            {"type": "string", "minLength": 1},
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["pattern"],
                "properties": {
                    "pattern": {"description": "A Python regular expression.", "type": "string", "minLength": 1},
                    "ignore_case": {"description": "Match regardless of case.", "type": "boolean", "default": True},
                },
            },
        ],
    },
    _regex,
    _regex_check,
)
NUMBER = BuiltIn(
    "number",
    "pass_rate",
    true_or(
        "Extract the numbers in the answer: pass if one equals the (numeric) expected answer, fail if there are "
        "numbers but none does, undecided if there are none.",
        tolerance={
            "description": "Largest absolute difference still counted as equal.",
            "type": "number",
            "minimum": 0,
            "default": 0,
        },
    ),
    _number,
)
RAILS = BuiltIn(
    "rails",
    "pass_rate",
    true_or(
        "Snap the answer to one of: the expected answer, 'not found', or unparsable (Arize's rails). Pass when it "
        "snaps to the right one; an answer that snaps to both or neither is undecided.",
        not_found={"description": "Phrases that mean 'not found'. Also used to grade negative controls.", **NOT_FOUND},
        normalize=NORMALIZE,
    ),
    _rails,
)
