"""`nspec vet`: is each question a fair test of attention? Every model is asked every question with only its needle
(or stack item) as the context, N times; a question any model fails even once is flagged — the benchmark would
measure comprehension, not retrieval. With `closed_book`, the context is empty and a question any model answers
right is flagged — it can be answered from memory.

Questions: a stack's questions file; for text haystacks, one drawn instance of each needle definition.
Answers are graded by the spec's deterministic scorers; an undecided answer counts as not passed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from nspec.compiler.cells import models_of, prompt_variants
from nspec.compiler.draws import Draws
from nspec.compiler.haystack import load_haystack
from nspec.compiler.needles import draw_needles
from nspec.compiler.requests import request_line
from nspec.compiler.tokenizers import encoding
from nspec.runners.live import CallerSettings, LiveRequest, request_tokens, run_live
from nspec.runners.providers import Outcome, credentials
from nspec.runners.scoring import score_cell
from nspec.spec.templates import render


@dataclass(frozen=True)
class VetQuestion:
    key: str  # the stack item, or the needle id
    question: str
    expected: list[str]
    context: str  # the needle sentence or the item


def vet_questions(spec: dict[str, Any], base_dir: str) -> list[VetQuestion]:
    haystack = spec["haystack"]
    if "stack" in haystack:
        source = load_haystack(haystack, base_dir)
        return [VetQuestion(q.item, q.question, [q.answer], source.items[q.item]) for q in source.questions]
    out = []
    for i, needle in enumerate(spec["needles"]):
        drawn = draw_needles([needle], Draws(spec.get("seed", 0), "vet", i))
        context = " ".join(n.text for n in drawn.instances)
        out.append(VetQuestion(needle.get("id") or f"n{i + 1}", drawn.question, drawn.expected, context))
    return out


def vet(spec: dict[str, Any], base_dir: str, trials: int, closed_book: bool) -> list[dict[str, Any]]:
    """Per model and question: how many of ``trials`` answers passed, and whether the question is flagged."""
    models = models_of(spec)
    settings = {
        m.label: CallerSettings(m.provider, credentials(m.entry), m.entry.get("rate_limits", {}), 3) for m in models
    }
    _, prompt = prompt_variants(spec)[0]
    questions = vet_questions(spec, base_dir)
    requests, asked = [], {}
    for model in models:
        template = {**prompt, **model.prompt_override}
        for q in questions:
            values = {"question": q.question}
            user = render(template["user"], {**values, "haystack": "" if closed_book else q.context})
            system = render(template["system"], values) if "system" in template else None
            prefill = render(template["prefill"], values) if "prefill" in template else None
            for t in range(trials):
                cid = f"vet-{len(requests)}"
                line = request_line(
                    model.provider,
                    model.name,
                    cid,
                    system,
                    user,
                    prefill,
                    model.params,
                    template.get("reserve_tokens", 300),
                )
                requests.append(
                    LiveRequest(
                        cid, model.label, model.provider, line, request_tokens(line, encoding("o200k_base").count)
                    )
                )
                asked[cid] = (model.label, q, t)
    outcomes: dict[str, Outcome] = {}

    def record(request: LiveRequest, outcome: Outcome) -> None:
        outcomes[request.custom_id] = outcome

    asyncio.run(run_live(settings, requests, record))
    scoring = spec.get("scoring") or [{"contains": "{answer}"}]
    tally: dict[tuple[str, str], list[int]] = {}
    for cid, (label, q, _) in asked.items():
        outcome = outcomes[cid]
        cell = {"cell_id": cid, "model": label, "prompt": None, "negative": False, "expected": q.expected}
        verdict = score_cell(scoring, cell, {"status": outcome.status, "text": outcome.text, "error": outcome.error})
        counts = tally.setdefault((label, q.key), [0, 0])
        counts[0] += verdict["verdict"] == "pass"
        counts[1] += 1
    rows = []
    by_key = {q.key: q for q in questions}
    for (label, key), (passed, asked_n) in tally.items():
        flagged = passed > 0 if closed_book else passed < asked_n
        rows.append(
            {
                "model": label,
                "question": by_key[key].question,
                "key": key,
                "passed": passed,
                "asked": asked_n,
                "flagged": flagged,
            }
        )
    return rows
