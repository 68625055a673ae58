"""Reading a data set a family's parameters name (OpenAI's GraphWalks or MRCR rows, say): JSONL, or one JSON list,
read through `Setup.read` and decoded as untrusted (`compiler.json_input`); every refusal a `ParamError` at the
parameter, naming the file's line."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..json_input import DataError, Record, Source, records
from . import ParamError, Setup

LIMIT = 1 << 30  # bytes: OpenAI's files of prompts up to 128K tokens are some 100 MB as JSONL
RECORD_LIMIT = 64 << 20  # bytes of one row: a prompt of 10M tokens is some 40 MB


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


def published(
    setup: Setup, generated: Sequence[str], what: str, checked: Callable[[Record, int], Any]
) -> list[Any] | None:
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


def rows(setup: Setup, key: str = "data") -> Iterator[Record]:
    """Each row of the file ``key`` names; parquet is refused with how to convert it (nspec reads no parquet: it
    would need pyarrow)."""
    name = str(setup.params[key])
    if name.endswith(".parquet"):
        raise ParamError(
            (key,),
            f"{name}: nspec reads JSONL or JSON, not parquet; convert it first, e.g. with pandas: "
            "pandas.read_parquet(file).to_json(out, orient='records', lines=True)",
        )
    source = Source(name, setup.read(key, LIMIT))
    try:
        yield from records(source, RECORD_LIMIT)
    except DataError as exc:
        raise ParamError((key,), str(exc)) from None


def limited(setup: Setup, checked: Callable[[Record, int], Any]) -> list[Any]:
    """The rows of `data`, each through ``checked(row, index)`` (a `ParamError` at `data` where it refuses one),
    the first `rows` of them when that is given."""
    limit = setup.params.get("rows")
    out: list[Any] = []
    for row in rows(setup):
        try:
            out.append(checked(row, len(out)))
        except DataError as exc:
            raise ParamError(("data",), str(exc)) from None
        if limit is not None and len(out) == limit:
            break
    if not out:
        raise ParamError(("data",), f"{setup.params['data']}: holds no rows")
    return out
