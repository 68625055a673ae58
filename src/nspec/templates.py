"""Templates: text with {placeholders}, as in Python's str.format; {{ and }} are literal braces. Scorer patterns
(regular expressions in which {answer} stands for the escaped expected answer) are checked here too."""

from __future__ import annotations

import re
import string
from collections import Counter


class TemplateError(ValueError):
    """A template that cannot be parsed; the message says what to fix."""


def placeholders(template: str) -> Counter[str]:
    """The placeholder names in ``template``, with how often each appears."""
    found: Counter[str] = Counter()
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise TemplateError(f"{exc}; write {{{{ or }}}} for a literal brace") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise TemplateError(
                f"placeholder {shown} must be a plain name such as {{answer}}; write {{{{ and }}}} for literal braces"
            )
        found[name] += 1
    return found


def render(template: str, values: dict[str, str]) -> str:
    """Fill ``template``; every placeholder must be in ``values``."""
    return template.format_map(values)


def regex_error(pattern: object) -> str | None:
    """Why a scorer's pattern does not compile (with {answer} standing for an escaped answer), or None."""
    if not isinstance(pattern, str):
        return "a pattern (text) is needed"
    try:
        re.compile(pattern.replace("{answer}", "x"))
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    return None
