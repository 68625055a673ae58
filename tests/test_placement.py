"""Needles between sentences, at every depth, in every kind of haystack: random specs compiled through the whole
pipeline, every needle found in the request file and checked by a rule written apart from the compiler's."""

import json
import re
import shutil
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nspec.compiler.providers.contract import message_text
from nspec.compiler.run_writer import compile_run
from nspec.spec import load_spec
from tests.conftest import ROOT

ABBREVIATIONS = {"Mr", "Mrs", "Ms", "Dr", "St", "Col", "Capt", "Messrs", "Rev", "Esq", "Jr", "Sr", "Gen", "Lt"}
OPEN, CLOSE = "<<<\n", "\n>>>"


def between_sentences(body: str, at: int, text: str) -> bool:
    """Whether ``text``, found at ``at`` in ``body``, sits between two sentences of the haystack: what precedes it
    is nothing, a paragraph break, or a finished sentence (not an abbreviation, an initial or an ellipsis); what
    follows is nothing, or white space and the start of a sentence."""
    before, after = body[:at], body[at + len(text) :]
    if before.strip() and not before.endswith("\n\n"):
        ended = re.search(r"(\w*)(\.+|[!?])[\"')\]]*\s+$", before)
        if ended is None or len(ended.group(2)) > 1:
            return False
        if ended.group(2) == "." and (ended.group(1) in ABBREVIATIONS or re.fullmatch(r"[A-Z]", ended.group(1))):
            return False
    if after.strip():
        return re.match(r"\s+[A-Z\"'(\[_]", after) is not None
    return True


def between_items(body: str, at: int, text: str, separator: str) -> bool:
    """Whether a stack item (``text``, repeated or not) starts and ends at item boundaries."""
    before, after = body[:at], body[at + len(text) :]
    return (not before or before.endswith(separator)) and (not after or after.startswith(separator))


def without_others(body: str, needles: list[str], needle: str) -> str:
    """``body`` without the needles other than ``needle`` (with the space each brought)."""
    for other in needles:
        if other != needle:
            body = body.replace(" " + other, "").replace(other + " ", "").replace(other, "")
    return body


def misplaced(run: Path, separator: str | None) -> list[str]:
    """The needles of a compiled run that are not between sentences (or items): one line each."""
    requests = {}
    for shard in sorted((run / "answers" / "requests").iterdir()):
        for line in shard.read_text(encoding="utf-8").splitlines():
            request = json.loads(line)
            body = request.get("body") or request["params"]
            user = next(message_text(m["content"]) for m in body["messages"] if m["role"] == "user")  # cache blocks too
            requests[request["custom_id"]] = user
    bad = []
    for raw in (run / "cells.jsonl").read_text(encoding="utf-8").splitlines():
        cell = json.loads(raw)
        user = requests[cell["cell_id"]]
        body = user[user.index(OPEN) + len(OPEN) : user.rindex(CLOSE)] if OPEN in user else user
        texts = [n["text"] for n in cell["needles"]]
        for needle in cell["needles"]:
            if separator is not None:
                block = (needle["text"] + separator) * (cell["repeat"] or 1)
                ok = between_items(body, body.index(block), block.removesuffix(separator), separator)
            else:
                hay = without_others(body, texts, needle["text"])
                at = hay.index(needle["text"])
                ok = hay.count(needle["text"]) == 1 and between_sentences(hay, at, needle["text"])
            if not ok:
                at = body.index(needle["text"])
                bad.append(f"{cell['cell_id']} depth {needle['depth_requested']}: {body[max(0, at - 60) : at + 80]!r}")
    return bad


HAYSTACKS = {
    "austen": "{corpus: austen}",
    "files": '{files: "docs/*.txt", vary: shuffle}',
    "noise": "{noise: true}",
    "stack": '{stack: {items: log.jsonl, questions: questions.jsonl, questions_per_trial: 1}, separator: "\\n"}',
}
NEEDLES = """needles:
  - text: "The special magic {{city}} number is: {{number}}."
    question: "What is the special magic {{city}} number?"
    answer: "{{number}}"
    count: {count}
    vars: {{city: {{choice: cities}}, number: {{digits: 7}}}}
placement: {placement}
"""
SPEC = """nspec: 1
name: placement
seed: {seed}
haystack: {haystack}
{needles}grid: {{context_lengths: {lengths}, depths: {depths}, trials: {trials}}}
prompt: {{user: "Read this.\\n<<<\\n{{haystack}}\\n>>>\\n{{question}}", reserve_tokens: 20}}
models: [{{id: openai/gpt-4.1-mini}}, {{id: anthropic/claude-haiku-4-5}}]
"""


@example(kind="files", seed=0, lengths=[5969], depths=[100.0, 69.0, 70.0], trials=1, count=1, placement="spread")
@example(kind="stack", seed=0, lengths=[5969], depths=[100.0, 69.0, 70.0], trials=1, count=1, placement="spread")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(sorted(HAYSTACKS)),
    seed=st.integers(0, 10_000),
    lengths=st.lists(st.integers(300, 6000), min_size=1, max_size=2, unique=True),
    depths=st.lists(
        st.one_of(st.sampled_from([0.0, 100.0]), st.floats(0, 100).map(lambda d: round(d, 1))),
        min_size=1,
        max_size=3,
        unique=True,
    ),
    trials=st.integers(1, 2),
    count=st.integers(1, 3),
    placement=st.sampled_from(["spread", "together", "random"]),
)
def test_needles_sit_between_sentences_at_every_depth(
    tmp_path_factory, kind, seed, lengths, depths, trials, count, placement
):
    folder = tmp_path_factory.mktemp("spec")
    shutil.copytree(ROOT / "tests" / "golden" / "specs" / "docs", folder / "docs")
    shutil.copy(ROOT / "specs" / "data" / "harbour-log.jsonl", folder / "log.jsonl")
    shutil.copy(ROOT / "specs" / "data" / "harbour-questions.jsonl", folder / "questions.jsonl")
    needles = "" if kind == "stack" else NEEDLES.format(count=count, placement=placement)
    text = SPEC.format(
        seed=seed, haystack=HAYSTACKS[kind], needles=needles, lengths=lengths, depths=depths, trials=trials
    )
    (folder / "placement.yaml").write_text(text, encoding="utf-8")
    loaded = load_spec(str(folder / "placement.yaml"))
    run = compile_run(loaded.data, loaded.base_dir, folder / "out", {}).path
    assert misplaced(run, "\n" if kind == "stack" else None) == []
