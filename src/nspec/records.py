"""The run directory's records, typed: a line of cells.jsonl, of a stage's results.jsonl, of scores.jsonl, and the
manifest. Their JSON Schemas are schemas/cell.v1.json, result.v1.json, score.v1.json and manifest.v1.json; the
tests check that every file a run writes validates, and that these types and the schemas name the same fields."""

# No `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations.
from typing import Any, NotRequired, TypedDict


class ContextLength(TypedDict):
    target: int  # the grid's length
    actual: int  # request tokens plus reserve_tokens
    prompt: int  # request tokens, in the model's tokenizer
    haystack: int  # haystack and needle tokens (in o200k_base for a proxy's or a provider's counts)
    o200k: int  # the request in the reference tokenizer
    characters: int  # of the message texts
    counted_by: str  # the tokenizer, or the provider's count-tokens endpoint (`nspec calibrate`)
    margin: NotRequired[float]  # a proxy's: how much higher the real count may be
    fitted_to: NotRequired[int]  # the length a proxy's margin shortened the cell to


class Depth(TypedDict):
    requested: float | None
    actual: float | None


class NeedleRecord(TypedDict):
    id: str
    index: int
    role: str  # target | distractor
    text: str
    depth_requested: float
    depth_actual: float


class CellRecord(TypedDict):
    """One line of cells.jsonl."""

    cell_id: str
    model: str
    model_id: str
    prompt: str | None
    context_length: ContextLength
    tokens_exact: bool
    depth: Depth
    trial: int
    repeat: int | None
    item: str | None
    needles: list[NeedleRecord]
    question: str
    expected: list[str]
    alternates: list[str]
    negative: bool
    max_tokens: int
    haystack_uses: int
    shard: str
    cache: NotRequired[dict[str, Any]]
    question_index: NotRequired[int]
    axes: NotRequired[dict[str, Any]]  # the family's axes without a field of their own, and the grid.params point
    data: NotRequired[dict[str, Any]]  # the family's data, for scorers and the report
    size: NotRequired[int]  # a Sized context's size


class Usage(TypedDict):
    input_tokens: int  # every prompt token, cached or not
    output_tokens: int
    cache_read_tokens: NotRequired[int]  # of input_tokens: read from the prompt cache (absent: none)
    cache_write_tokens: NotRequired[int]  # written to it for five minutes
    cache_write_1h_tokens: NotRequired[int]  # written to it for an hour


class ResultRecord(TypedDict):
    """One line of a stage's results.jsonl: the final result of one request, keyed by its cell (or judge) id."""

    cell_id: str
    stage: str
    model: str
    status: str  # ok | error | expired | cancelled
    text: str | None
    finish_reason: str | None
    usage: Usage
    error: dict[str, Any] | None
    source: dict[str, Any]  # kind (batch | live | local | import) and where it came from


class ScorerVerdict(TypedDict):
    scorer: str
    rule: NotRequired[str]  # the step of the scorer that decided (auto's, negative's); else the scorer's name
    verdict: str
    reason: str
    score: float | None


class VoteRecord(TypedDict):
    judge: str
    attempt: int
    vote: str | None  # pass | fail | scored (score-10, no threshold) | None: no verdict (an error, a refusal, ...)
    detail: str
    reply: str
    pending: bool
    score: NotRequired[int]


class ScoreRecord(TypedDict):
    """One line of scores.jsonl."""

    cell_id: str
    model: str
    prompt: str | None
    negative: bool
    scorers: list[ScorerVerdict]
    votes: list[VoteRecord]
    verdict: str  # pass | fail | scored (a score-10 panel without a threshold) | undecided | error
    score: float | None
    reason: str
    scorer_verdict: NotRequired[str]
    judge_verdict: NotRequired[str | None]
    judge_score: NotRequired[float]
    judge_error: NotRequired[bool]
    needles_found: NotRequired[float]


class Shard(TypedDict):
    file: str
    requests: int
    bytes: int
    sha256: str


class ModelManifest(TypedDict):
    label: str
    id: str
    mode: str
    format: str
    tokenizer: dict[str, Any]
    cells: int
    negative_controls: int
    dropped_cells: int
    requests: int
    input_tokens: int
    output_tokens_max: int
    cache: dict[str, Any] | None
    cost_usd: dict[str, Any]
    shards: list[Shard]


class Manifest(TypedDict):
    """manifest.json."""

    nspec_format: int
    nspec_version: str
    name: str
    run_id: str
    compile_hash: str
    task: NotRequired[dict[str, Any]]  # the task family a spec names
    haystack: dict[str, Any]
    models: list[ModelManifest]
    judges: list[dict[str, Any]]
    fallbacks: list[dict[str, Any]]
    prices: dict[str, Any]
    provenance: dict[str, Any]
    totals: dict[str, Any]
