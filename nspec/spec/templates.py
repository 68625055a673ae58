"""Templates: text with {placeholders}, as in Python's str.format; {{ and }} are literal braces."""

from __future__ import annotations

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
            raise TemplateError(f"placeholder {shown} must be a plain name such as {{answer}}")
        found[name] += 1
    return found


def render(template: str, values: dict[str, str]) -> str:
    """Fill ``template``; every placeholder must be in ``values``."""
    return template.format_map(values)
