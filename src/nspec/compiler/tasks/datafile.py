"""Reading a data set a family's parameters name (OpenAI's GraphWalks or MRCR rows, say): JSONL, or one JSON list,
read through `Setup.read`; every refusal a `ParamError` at the parameter, naming the file's line."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from . import ParamError, Setup

LIMIT = 1 << 30  # bytes: OpenAI's files of prompts up to 128K tokens are some 100 MB as JSONL


def data_param(shape: str, instead: str) -> dict[str, Any]:
    """The schema of a family's `data` parameter: a published file of rows of ``shape``, sent ``instead`` of
    generated contexts."""
    return {
        "description": f"{shape} as JSONL or a JSON list of rows, relative to the spec's folder: {instead}.",
        "type": "string",
        "minLength": 1,
    }


ROWS_PARAM = {
    "description": "With `data`: how many of its rows to run (the first ones); default all.",
    "type": "integer",
    "minimum": 1,
}


def published(setup: Setup, generated: Sequence[str], what: str, checked: Callable[..., Any]) -> list[Any] | None:
    """The checked rows of the `data` file the parameters name (`limited`), or None when they name none: a
    family's published rows in place of the contexts it generates. Parameters only ``generated`` ``what`` use are
    refused beside `data`, and `rows` without it."""
    params = setup.params
    if "data" not in params:
        if "rows" in params:
            raise ParamError(("rows",), "`rows` counts the rows of a `data` file; give one, or leave `rows` out")
        return None
    for key in generated:
        if key in params:
            raise ParamError((key,), f"`{key}` is for generated {what}; a `data` file's rows say their own")
    return limited(setup, checked)


def rows(setup: Setup, key: str = "data") -> Iterator[tuple[str, Any]]:
    """(where, row) of each row of the file ``key`` names, ``where`` being `file:line`; parquet is refused with how
    to convert it (nspec reads no parquet: it would need pyarrow)."""
    name = str(setup.params[key])
    if name.endswith(".parquet"):
        raise ParamError(
            (key,),
            f"{name}: nspec reads JSONL or JSON, not parquet; convert it first, e.g. with pandas: "
            "pandas.read_parquet(file).to_json(out, orient='records', lines=True)",
        )
    data = setup.read(key, LIMIT)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParamError((key,), f"{name}: is not UTF-8 text (byte {exc.start})") from None
    if text.lstrip().startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ParamError((key,), f"{name}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg})") from None
        yield from ((f"{name} row {i + 1}", row) for i, row in enumerate(parsed))
        return
    found = False
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ParamError((key,), f"{name}:{number}:{exc.colno}: not a JSON row ({exc.msg})") from None
        found = True
        yield f"{name}:{number}", row
    if not found:
        raise ParamError((key,), f"{name}: holds no rows")


def limited(setup: Setup, checked: Any) -> list[Any]:
    """The rows of `data`, each through ``checked(where, row)``, the first `rows` of them when that is given."""
    limit = setup.params.get("rows")
    out: list[Any] = []
    for where, row in rows(setup):
        out.append(checked(where, row, len(out)))
        if limit is not None and len(out) == limit:
            break
    if not out:
        raise ParamError(("data",), f"{setup.params['data']}: holds no rows")
    return out
