"""Costs: prices per lane with cache reads and writes, batch stacking and long-context tiers; the judge prompt's
estimate; questions sharing one context, cached as the provider caches it (the emulator's usage measures it); the
control arm; budgets refused before any work."""

from __future__ import annotations

import itertools
import json

import pytest

from nspec.compiler.caching import reads_to_pay
from nspec.compiler.judge_prompts import JUDGE_PROMPT_TOKENS, PRESETS, Graded
from nspec.compiler.prices import LongContext, Price, Usage, price_for
from nspec.compiler.tokenizers import encoding

pytestmark = pytest.mark.usefixtures("api_keys")

HAIKU = price_for("anthropic/claude-haiku-4-5", None)


def test_prices_per_lane_with_cache_and_tiers():
    assert HAIKU is not None and HAIKU.source and HAIKU.as_of
    usage = Usage(1_000_000, 0, cache_read_tokens=500_000, cache_write_1h_tokens=100_000)
    # Anthropic: the batch discount applies to cache reads and writes too
    assert HAIKU.cost(usage, "live") == pytest.approx(0.4 + 0.05 + 0.2)
    assert HAIKU.cost(usage, "batch") == pytest.approx((0.4 + 0.05 + 0.2) / 2)
    vertex_like = Price(1.0, 5.0, cache_read=0.1, batch_discount=0.5, batch_stacks=False)
    assert vertex_like.cost(Usage(1_000_000, 0, 500_000), "batch") == pytest.approx(0.25 + 0.05)
    no_batch_cache = Price(1.0, 5.0, cache_read=0.25, batch_discount=0.5, batch_caching=False)
    assert no_batch_cache.cost(Usage(1_000_000, 0, 500_000), "batch") == pytest.approx(0.5)
    tiered = Price(1.0, 10.0, long_context=LongContext(272_000, 2.0, 1.5))
    assert tiered.cost(Usage(272_000, 1_000_000), "live") == pytest.approx(0.272 + 10.0)
    assert tiered.cost(Usage(272_001, 1_000_000), "live") == pytest.approx(2 * 0.272001 + 15.0)
    assert Price(1.0, 1.0).cost(usage, "flex") is None  # no flex lane: unknown, not a guess


def test_a_write_pays_after_one_read_at_five_minutes_and_two_at_an_hour():
    assert reads_to_pay(1.0, 1.25, 0.1) == 1
    assert reads_to_pay(1.0, 2.0, 0.1) == 2


def test_the_judge_prompt_estimate_covers_the_prompt():
    empty = Graded("", [""], [], "", False, "x")
    fixed = [
        sum(encoding("o200k_base").count(t or "") for t in PRESETS["nspec"].messages(rubric, empty))
        for rubric in ("pass-fail", "score-10")
    ]
    assert max(fixed) <= JUDGE_PROMPT_TOKENS < max(fixed) * 1.25


SPEC = """\
nspec: 1
name: shared
seed: 4
haystack: {{corpus: austen, vary: none}}
needles:
  - {{text: "The special magic {{city}} number is: {{number}}.", question: "What is the special magic {{city}} number?",
     answer: "{{number}}", vars: {{city: {{choice: cities}}, number: {{digits: 7}}}}}}
grid: {{context_lengths: [6000], depths: [25, 75], questions_per_context: 4}}
prompt: {{user: "{{haystack}}\\n\\nAnswer from the text. {{question}}", reserve_tokens: 60}}
cache: {{control: {control}}}
{budget}models:
  - {{id: anthropic/claude-haiku-4-5, base_url: "{url}", params: {{max_tokens: 40}}}}
run: {{poll: {{min_seconds: 0.01, max_seconds: 0.05}}}}
"""


def test_questions_share_one_context_that_claude_caches_once(emulator, spec_file, cli, tmp_path):
    emu = emulator()
    spec = spec_file(SPEC.format(url=emu.anthropic_base_url, control=0.0, budget=""))
    ran = cli("run", spec, "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 0, ran.err
    (run,) = (tmp_path / "out" / "shared").iterdir()
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    assert [c["question_index"] for c in cells] == [0, 1, 2, 3] * 2
    assert len({c["question"] for c in cells[:4]}) == 4  # distinct questions about one context
    shard = next((run / "answers" / "requests").glob("*.jsonl"))
    lines = [json.loads(line) for line in shard.read_text().splitlines()]
    first, sibling = lines[0]["params"]["messages"][0]["content"], lines[1]["params"]["messages"][0]["content"]
    assert first[0]["text"] == sibling[0]["text"] and first[0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    usage = {r["cell_id"]: r["usage"] for r in map(json.loads, (run / "answers" / "results.jsonl").open())}
    by_index = [usage[c["cell_id"]] for c in cells]
    # The emulator (as Anthropic) wrote each context once and read it for the three other questions
    assert [bool(u.get("cache_write_1h_tokens")) for u in by_index] == [True, False, False, False] * 2
    assert [u.get("cache_read_tokens", 0) > 4000 for u in by_index] == [False, True, True, True] * 2
    for cell, u in zip(cells, by_index, strict=True):
        predicted = cell["cache"]
        seen = u.get("cache_read_tokens", 0) or u.get("cache_write_1h_tokens", 0)
        assert abs(seen - max(predicted["read_tokens"], predicted["write_tokens"])) < 0.1 * u["input_tokens"]
    status = cli("status", str(run), "--json")
    (model,) = json.loads(status.out)["stages"][0]["models"]
    # status prices what the provider reported, request by request: 1h writes at 2x, reads at 0.1x, batch halved
    billed = sum(HAIKU.cost(Usage.of(u), "batch") or 0 for u in by_index)
    assert model["cost_usd"] == round(billed, 4) and model["cache_read_tokens"] > 0


def test_the_control_arm_is_sent_uncached(emulator, spec_file, cli, tmp_path):
    emu = emulator()
    spec = spec_file(SPEC.format(url=emu.anthropic_base_url, control=1.0, budget=""))
    assert cli("run", spec, "--wait", "-o", str(tmp_path / "out")).code == 0
    (run,) = (tmp_path / "out" / "shared").iterdir()
    assert {json.loads(line)["cache"]["arm"] for line in (run / "cells.jsonl").open()} == {"control"}
    lines = next((run / "answers" / "requests").glob("*.jsonl")).read_text()
    assert "cache_control" not in lines
    results = [json.loads(line) for line in (run / "answers" / "results.jsonl").open()]
    assert not any(r["usage"].get("cache_read_tokens") for r in results)


def test_a_budget_below_the_estimate_is_refused_before_any_work(emulator, spec_file, cli, tmp_path):
    emu = emulator()
    spec = spec_file(SPEC.format(url=emu.anthropic_base_url, control=0.0, budget="budget: {max_usd: 0.001}\n"))
    ran = cli("run", spec, "-o", str(tmp_path / "out"))
    assert ran.code == 2 and "over the budget of $0.00" in ran.err
    assert not (tmp_path / "out" / "shared").exists() or not list((tmp_path / "out").rglob("ledger*"))
    ran = cli("run", spec, "-o", str(tmp_path / "out"), "--max-usd", "100")
    assert ran.code in (0, 3), ran.err


def test_flex_is_offered_where_openai_has_it_and_refused_elsewhere(emulator, spec_file, cli, tmp_path):
    import openai

    emu = emulator()
    flex = SPEC.format(url=emu.openai_base_url, control=0.0, budget="").replace(
        "anthropic/claude-haiku-4-5", "openai/gpt-5-mini, mode: flex"
    )
    ran = cli("run", spec_file(flex), "--wait", "-o", str(tmp_path / "out"))
    assert ran.code == 0, ran.err
    (run,) = (tmp_path / "out" / "shared").iterdir()
    line = json.loads(next((run / "answers" / "requests").glob("*.jsonl")).read_text().splitlines()[0])
    assert line["body"]["service_tier"] == "flex" and line["body"]["prompt_cache_key"].startswith("nspec-")
    # gpt-4.1 has no flex tier: validate says so, and the emulator refuses it as OpenAI does
    checked = cli("validate", spec_file(flex.replace("gpt-5-mini", "gpt-4.1")))
    assert checked.code == 2 and "has no flex tier" in checked.err
    client = openai.OpenAI(api_key="test-key", base_url=emu.openai_base_url, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="service_tier"):
        client.chat.completions.create(
            model="gpt-4.1", messages=[{"role": "user", "content": "hi"}], service_tier="flex", max_tokens=5
        )


LADDER_SPEC = """\
nspec: 1
name: ladder
seed: 5
haystack: {{corpus: austen, vary: none}}
needles:
  - {{text: "The secret code word is heliotrope.", question: "What is the secret code word?", answer: heliotrope}}
grid: {{context_lengths: [8000, 12000, 16000], depths: [30, 60, 90]}}
prompt: {{user: "{{haystack}}\\n\\nAnswer from the text. {{question}}", reserve_tokens: 60}}
cache: {{control: 0}}
models:
  - {{id: anthropic/claude-haiku-4-5, base_url: "{url}", params: {{max_tokens: 40}}}}
run: {{poll: {{min_seconds: 0.01, max_seconds: 0.05}}}}
"""


def test_claude_cells_of_different_contexts_read_the_haystack_before_their_needles(emulator, spec_file, cli, tmp_path):
    emu = emulator()
    ran = cli("run", spec_file(LADDER_SPEC.format(url=emu.anthropic_base_url)), "--wait", "-o", str(tmp_path / "o"))
    assert ran.code == 0, ran.err
    (run,) = (tmp_path / "o" / "ladder").iterdir()
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    shard = next((run / "answers" / "requests").glob("*.jsonl"))
    contents = [json.loads(line)["params"]["messages"][0]["content"] for line in shard.read_text().splitlines()]
    contents = [c for c in contents if isinstance(c, list)]  # a needle before the model's minimum: nothing to cache
    assert len(contents) >= 5
    # Every request splits its haystack at the same points: its block ends are a prefix of one shared ladder
    ends = [list(itertools.accumulate(len(b["text"]) for b in blocks[:-1])) for blocks in contents]
    ladder = max(ends, key=len)
    assert all(e == ladder[: len(e)] for e in ends) and len(ladder) > 10
    texts = ["".join(b["text"] for b in blocks) for blocks in contents]
    widest = texts[ends.index(ladder)]
    assert all(t[:n] == widest[:n] for t, e in zip(texts, ends, strict=True) for n in e[-1:])
    assert all(sum("cache_control" in b for b in blocks) <= 2 for blocks in contents)
    usage = {r["cell_id"]: r["usage"] for r in map(json.loads, (run / "answers" / "results.jsonl").open())}
    reads = [usage[c["cell_id"]].get("cache_read_tokens", 0) for c in cells]
    # After the first cells the haystack before each needle comes from the cache, as planned
    assert sum(reads) > 0.3 * sum(u["input_tokens"] for u in usage.values())
    for cell in cells:  # as planned, within the proxy tokenizer's error
        read = usage[cell["cell_id"]].get("cache_read_tokens", 0)
        assert abs(read - cell["cache"]["read_tokens"]) <= 0.03 * read
    billed = sum(HAIKU.cost(Usage.of(u), "batch") or 0 for u in usage.values())
    uncached = sum(HAIKU.cost(Usage(u["input_tokens"], u["output_tokens"]), "batch") or 0 for u in usage.values())
    assert billed < 0.85 * uncached


def test_requests_that_share_a_prefix_are_kept_in_one_shard(spec_file, cli, tmp_path):
    # three trials of four cells each (a cache group per trial), shards of at most six requests
    text = LADDER_SPEC.format(url="http://127.0.0.1:9").replace("depths: [30, 60, 90]", "depths: [30, 60]")
    text = text.replace("[8000, 12000, 16000]", "[8000, 12000]").replace("grid: {", "grid: {trials: 3, ")
    text = text.replace("run: {", "run: {shard: {max_requests: 6}, ")
    assert cli("compile", spec_file(text), "-o", str(tmp_path / "o")).code == 0
    (run,) = (tmp_path / "o" / "ladder").iterdir()
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    shards = {}
    for cell in cells:
        shards.setdefault(cell["shard"], set()).add(cell["trial"])
    assert sorted(map(sorted, shards.values())) == [[0], [1], [2]]
    # without caching, shards fill up
    plain = text.replace("cache: {control: 0}", "cache: {mode: off}")
    assert cli("compile", spec_file(plain), "-o", str(tmp_path / "p")).code == 0
    (run,) = (tmp_path / "p" / "ladder").iterdir()
    assert len(list((run / "answers" / "requests").glob("*.jsonl"))) == 2


def test_flex_capacity_refusals_are_retried_not_recorded(emulator, spec_file, cli, tmp_path):
    from nspec.runners import pipeline
    from nspec.runners.emulator.config import Faults

    emu = emulator(faults=Faults(flex_unavailable_rate=0.3), seed=2)
    flex = SPEC.format(url=emu.openai_base_url, control=0.0, budget="").replace(
        "anthropic/claude-haiku-4-5", "openai/gpt-5-mini, mode: flex"
    )
    assert cli("compile", spec_file(flex), "-o", str(tmp_path / "out")).code == 0
    (run,) = (tmp_path / "out" / "shared").iterdir()
    pipeline.submit(run, live_backoff=0.001)
    assert emu.emulation.statuses[429] > 0  # flex said "Resource Unavailable" to some calls
    results = [json.loads(line) for line in (run / "answers" / "results.jsonl").open()]
    assert len(results) == 8 and all(r["status"] == "ok" for r in results)
    assert emu.emulation.answered["openai"] == 8  # each answered once: a refusal is not an answer


def test_the_report_compares_the_control_arm_with_the_cached_cells(emulator, spec_file, cli, tmp_path):
    from nspec.runners.report.stats import fisher_exact

    emu = emulator()
    spec = spec_file(SPEC.format(url=emu.anthropic_base_url, control=0.3, budget=""))
    assert cli("run", spec, "--wait", "-o", str(tmp_path / "out")).code == 0
    (run,) = (tmp_path / "out" / "shared").iterdir()
    arms = [json.loads(line)["cache"]["arm"] for line in (run / "cells.jsonl").open()]
    page = (run / "report" / "index.html").read_text()
    section = page[page.index('<section id="caching">') : page.index('<section id="charts">')]
    assert f"of {arms.count('cached')} (" in section and f"of {arms.count('control')} (" in section
    assert "within noise" in section
    # Fisher's exact test, checked against known values
    assert fisher_exact(8, 10, 1, 10) == pytest.approx(0.005477, abs=1e-6)
    assert fisher_exact(5, 10, 5, 10) == pytest.approx(1.0)
    assert fisher_exact(3, 3, 0, 0) == 1.0
