"""`nspec vet`: is each question a fair test of attention? Every model is asked every question with only its needle
(or stack item) as the context, N times; a question any model fails even once is flagged — the benchmark would
measure comprehension, not retrieval. With `closed_book`, the context is empty and a question any model answers
right is flagged — it can be answered from memory.

Questions: a stack's questions file; for text haystacks, one drawn instance of each needle definition.
Answers are graded by the spec's whole scoring section: its scorers, then its judges (asked live) for what the
scorers leave undecided, with the run's rules — a judge reply without a verdict is asked again, votes need a quorum.
An answer still undecided (no judges, or too few verdicts) counts as not passed, and is counted as such.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nspec.compiler.draws import Draws
from nspec.compiler.haystack import load_haystack
from nspec.compiler.models import Model, models_of, prompt_variants
from nspec.compiler.needles import draw_needles
from nspec.compiler.providers.credentials import credentials
from nspec.compiler.providers.io import Outcome
from nspec.compiler.tasks import registry
from nspec.errors import ProviderError, UserError
from nspec.inputs import Confinement
from nspec.prompt import Prompt
from nspec.runners.grading.judging import Grading, Vote, quorum
from nspec.runners.grading.scoring import apply_votes, score_cell
from nspec.runners.live import CallerSettings, LiveRequest, request_tokens, run_live
from nspec.scorers import scores_only
from nspec.templates import render


@dataclass(frozen=True)
class VetQuestion:
    key: str  # the stack item, or the needle id
    question: str
    expected: list[str]
    alternates: list[str]
    context: str  # the needle sentence or the item


def vet_questions(spec: dict[str, Any], base_dir: str, confinement: Confinement | None = None) -> list[VetQuestion]:
    family = registry.named(spec)
    if family not in ("needle", "stack"):
        raise UserError(f"nspec vet asks the questions of needles and stacks; the {family} task family has none")
    haystack = spec["haystack"]
    if "stack" in haystack:
        source = load_haystack(haystack, base_dir, confinement)
        return [
            VetQuestion(q.item, q.question, [q.answer], list(q.alternates), source.items[q.item])
            for q in source.questions
        ]
    out = []
    for i, needle in enumerate(spec["needles"]):
        drawn = draw_needles([needle], Draws(spec.get("seed", 0), "vet", i))
        context = " ".join(n.text for n in drawn.instances)
        key = needle.get("id") or f"n{i + 1}"
        out.append(VetQuestion(key, drawn.question, drawn.expected, drawn.alternates, context))
    return out


def vet(
    spec: dict[str, Any], base_dir: str, trials: int, closed_book: bool, confinement: Confinement | None = None
) -> list[dict[str, Any]]:
    """Per model and question: how many of ``trials`` answers passed, and whether the question is flagged."""
    judge = next((s["judge"] for s in spec.get("scoring") or [] if "judge" in s), None)
    if judge is not None and scores_only(judge):
        raise UserError(
            "nspec vet needs verdicts, and the spec's score-10 judges give scores only: give the judge entry a "
            "`threshold` (the lowest score that passes) to vet with it"
        )
    models = models_of(spec)
    attempts = int(spec.get("run", {}).get("retry", {}).get("attempts", 3))
    settings = {
        m.label: CallerSettings(m.provider, credentials(m.entry), m.entry.get("rate_limits", {}), attempts)
        for m in models
    }
    _, prompt = prompt_variants(spec)[0]
    questions = vet_questions(spec, base_dir, confinement)
    requests, asked = _requests(models, prompt, questions, trials, closed_book)
    outcomes: dict[str, Outcome] = {}
    _ask(settings, requests, outcomes)
    lines = _grade(spec["scoring"], asked, outcomes, attempts)
    return _tally(questions, asked, lines, closed_book)


def _requests(
    models: list[Model], prompt: dict[str, Any], questions: list[VetQuestion], trials: int, closed_book: bool
) -> tuple[list[LiveRequest], dict[str, tuple[str, VetQuestion]]]:
    """Each model asked each question ``trials`` times, with its needle (or nothing, ``closed_book``) as the
    haystack; and the model and question each request asks, by its id."""
    requests: list[LiveRequest] = []
    asked: dict[str, tuple[str, VetQuestion]] = {}
    for model in models:
        template = {**prompt, **model.prompt_override}
        for q in questions:
            values = {"question": q.question}
            user = render(template["user"], {**values, "haystack": "" if closed_book else q.context})
            system = render(template["system"], values) if "system" in template else None
            prefill = render(template["prefill"], values) if "prefill" in template else None
            for _ in range(trials):
                cid = f"vet-{len(requests)}"
                line = model.api.request_line(
                    model.entry,
                    cid,
                    Prompt.ask(system, user, prefill),
                    model.params,
                    template.get("reserve_tokens", 300),
                )
                requests.append(
                    LiveRequest(cid, model.label, model.provider, line, request_tokens(model.provider, line))
                )
                asked[cid] = (model.label, q)
    return requests, asked


def _grade(
    scoring: list[Any], asked: dict[str, tuple[str, VetQuestion]], outcomes: dict[str, Outcome], attempts: int
) -> dict[str, dict[str, Any]]:
    """Each answer's score line, by request id: the scorers first, then the judges (if any) for what they leave
    undecided."""
    cells = {}
    lines = {}
    for cid, (label, q) in asked.items():
        outcome = outcomes[cid]
        cells[cid] = {
            "cell_id": cid,
            "model": label,
            "prompt": None,
            "negative": False,
            "question": q.question,
            "expected": q.expected,
            "alternates": q.alternates,
            "needles": [{"role": "target", "text": q.context}],
        }
        lines[cid] = score_cell(
            scoring, cells[cid], {"status": outcome.status, "text": outcome.text, "error": outcome.error}
        )
    judge = next((s["judge"] for s in scoring if "judge" in s), None)
    if judge is not None:
        undecided = {cid: outcomes[cid].text or "" for cid, line in lines.items() if line["verdict"] == "undecided"}
        for cid, line in ask_judges(judge, cells, undecided, attempts).items():
            lines[cid] = line if lines[cid]["verdict"] != "undecided" else {**lines[cid], **line}
    return lines


def _tally(
    questions: list[VetQuestion],
    asked: dict[str, tuple[str, VetQuestion]],
    lines: dict[str, dict[str, Any]],
    closed_book: bool,
) -> list[dict[str, Any]]:
    """Per model and question, its answers passed, asked and undecided, and whether the question is flagged."""
    tally: dict[tuple[str, str], list[int]] = {}
    for cid, (label, q) in asked.items():
        counts = tally.setdefault((label, q.key), [0, 0, 0])
        counts[0] += lines[cid]["verdict"] == "pass"
        counts[1] += 1
        counts[2] += lines[cid]["verdict"] == "undecided"
    rows = []
    by_key = {q.key: q for q in questions}
    for (label, key), (passed, asked_n, undecided_n) in tally.items():
        flagged = passed > 0 if closed_book else passed < asked_n
        rows.append(
            {
                "model": label,
                "question": by_key[key].question,
                "key": key,
                "passed": passed,
                "asked": asked_n,
                "undecided": undecided_n,
                "flagged": flagged,
            }
        )
    return rows


def ask_judges(
    settings: dict[str, Any], cells: dict[str, dict[str, Any]], answers: dict[str, str], attempts: int
) -> dict[str, dict[str, Any]]:
    """Grade ``answers`` (by cell id) with the judge panel ``settings``, live: a reply without a verdict is asked
    again up to ``attempts`` times in all; votes combine as in a run (quorum, rule). Returns each cell's votes,
    judge verdict, and verdict."""
    judges = models_of({"models": settings["models"]})
    grading = Grading.of(settings)
    callers = {
        m.label: CallerSettings(m.provider, credentials(m.entry), m.entry.get("rate_limits", {}), attempts)
        for m in judges
    }
    votes: dict[tuple[str, str], dict[str, Any]] = {}
    todo = [(cid, m) for cid in answers for m in judges]
    for attempt in range(1, attempts + 1):
        if not todo:
            break
        requests: dict[str, tuple[str, Model, LiveRequest]] = {}
        for cid, model in todo:
            rid = f"{cid}-{grading.key(model.label, attempt)}"
            line = grading.request(model, cells[cid], answers[cid], rid)
            requests[rid] = (
                cid,
                model,
                LiveRequest(rid, model.label, model.provider, line, request_tokens(model.provider, line)),
            )
        replies: dict[str, Outcome] = {}
        _ask(callers, [r for _, _, r in requests.values()], replies)
        todo = []
        for rid, (cid, model, _) in requests.items():
            outcome = replies[rid]
            if outcome.status != "ok":
                vote = Vote(None, f"no verdict: request failed ({(outcome.error or {}).get('code')})")
            else:
                vote = grading.read(outcome.text or "")
                if vote.vote is None and attempt < attempts:
                    todo.append((cid, model))
            votes[(cid, model.label)] = {
                "judge": model.label,
                "attempt": attempt,
                "vote": vote.vote,
                "detail": vote.detail,
                "reply": (outcome.text or "")[:200],
                "pending": False,
            }
    out = {}
    need = quorum(settings, len(judges))
    for cid in answers:
        line = {"verdict": "undecided", "reason": "", "votes": [votes[(cid, m.label)] for m in judges]}
        out[cid] = apply_votes(line, line["votes"], len(judges), settings.get("vote", "majority"), need)
    return out


def _ask(settings: dict[str, CallerSettings], requests: list[LiveRequest], outcomes: dict[str, Outcome]) -> None:
    """Ask every request live, its outcome into ``outcomes``; a model that stays unavailable is an error to run
    again later (vetting needs every answer)."""
    by_model: dict[str, list[LiveRequest]] = {}
    for request in requests:
        by_model.setdefault(request.model, []).append(request)
    report = asyncio.run(run_live(settings, by_model, _recorder(outcomes)))
    if report.closed:
        raise ProviderError("live", "; ".join(report.closed.values()))


def _recorder(into: dict[str, Outcome]) -> Callable[[LiveRequest, Outcome], None]:
    def record(request: LiveRequest, outcome: Outcome) -> None:
        into[request.custom_id] = outcome

    return record
