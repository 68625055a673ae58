"""What caching and batching save, measured through `nspec emulator` (which keeps prompt caches as each provider
does and reports their usage): a kamradt-classic grid (15 lengths from 1K to 128K, 15 depths) and a needlestack-like
grid asking several questions of each context, on anthropic/claude-haiku-4-5 (batch, and batch with caching) and
openai/gpt-5-mini (batch with its cache key, and flex). For each: the run's actual cost, from the usage the emulator
reported, as a share of the live list price of the same requests sent uncached; the plan's estimate; and the pass
rates of the cached cells and of the control arm sent with caching defeated.

Run: .venv/bin/python bench/costs.py [--quick]   (--quick: 5 lengths up to 32K, 5 depths)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nspec.compiler.prices import Lane, Usage, price_for  # noqa: E402
from nspec.runners import pipeline  # noqa: E402
from nspec.runners.emulator import Emulator, EmulatorConfig  # noqa: E402
from nspec.runners.emulator.config import Timing  # noqa: E402

QUICK = "--quick" in sys.argv
LENGTHS = [1000, 32000] if QUICK else [round(1000 + i * (127000 / 14)) for i in range(15)]
DEPTHS: list[float] = [0, 50, 100] if QUICK else [round(100 * i / 14, 2) for i in range(15)]
CLASSIC_NEEDLE = (
    '  - {text: "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.", '
    'question: "What is the best thing to do in San Francisco?", answer: "eat a sandwich and sit in Dolores Park"}'
)
MULTI_NEEDLE = (
    '  - {text: "The special magic {city} number is: {number}.", question: "What is the special magic {city} '
    'number?", answer: "{number}", vars: {city: {choice: cities}, number: {digits: 7}}}'
)


def spec_text(name: str, needle: str, model: str, per_context: int, lengths: list[int], depths: list[float]) -> str:
    return f"""nspec: 1
name: {name}
seed: 3
haystack: {{corpus: austen, vary: none}}
needles:
{needle}
grid: {{context_lengths: {lengths}, depths: {depths}, questions_per_context: {per_context}}}
prompt: {{user: "{{haystack}}\\n\\nAnswer from the text above, briefly. {{question}}", reserve_tokens: 100}}
models:
  - {model}
run: {{poll: {{min_seconds: 0.05, max_seconds: 0.2}}}}
"""


def measure(path: Path) -> dict[str, dict[str, float]]:
    """Per model: the run's cost as billed, the same requests' live list price, estimates and pass rates by arm."""
    manifest = json.loads((path / "manifest.json").read_text())
    spec_models = {m["label"]: m for m in manifest["models"]}
    arms = {}
    for line in (path / "cells.jsonl").read_text().splitlines():
        cell = json.loads(line)
        arms[cell["cell_id"]] = (cell.get("cache") or {}).get("arm", "cached")
    verdicts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for line in (path / "scores.jsonl").read_text().splitlines():
        score = json.loads(line)
        tally = verdicts[(score["model"], arms[score["cell_id"]])]
        tally[0] += score["verdict"] == "pass"
        tally[1] += 1
    out: dict[str, dict[str, float]] = {}
    for line in (path / "answers" / "results.jsonl").read_text().splitlines():
        result = json.loads(line)
        model = spec_models[result["model"]]
        price = price_for(model["id"], None)
        assert price is not None
        usage = Usage.of(result["usage"])
        lane: Lane = "batch" if result["source"]["kind"] == "batch" else "flex" if model["mode"] == "flex" else "live"
        row = out.setdefault(result["model"], defaultdict(float))
        actual = price.cost(usage, lane) or 0.0
        listed = price.cost(Usage(usage.input_tokens, usage.output_tokens), "live") or 0.0
        row["actual"] += actual
        row["list"] += listed
        if arms[result["cell_id"]] == "cached":
            row["cached_actual"] += actual
            row["cached_list"] += listed
        row["read"] += usage.cache_read_tokens
        row["written"] += usage.cache_write_tokens + usage.cache_write_1h_tokens
        row["input"] += usage.input_tokens
    for label, row in out.items():
        row["estimate"] = spec_models[label]["cost_usd"]["run"] or 0.0
        row["estimate_live"] = spec_models[label]["cost_usd"]["live"] or 0.0
        for arm in ("cached", "control"):
            passed, total = verdicts[(label, arm)]
            row[f"{arm}_cells"] = total
            row[f"{arm}_pass"] = passed / total if total else float("nan")
    return out


def main() -> None:
    os.environ.setdefault("ANTHROPIC_API_KEY", "bench")
    os.environ.setdefault("OPENAI_API_KEY", "bench")
    timing = Timing(validate_seconds=0.05, seconds_per_request=0.0005, finalize_seconds=0.05)
    claude = '{id: anthropic/claude-haiku-4-5, base_url: "ANTHROPIC", params: {max_tokens: 60}}'
    gpt = '{id: openai/gpt-5-mini, base_url: "OPENAI", params: {max_tokens: 60}}'
    flex = '{id: openai/gpt-5-mini, name: gpt-5-mini-flex, mode: flex, base_url: "OPENAI", params: {max_tokens: 60}}'
    with tempfile.TemporaryDirectory() as tmp:
        cases = [
            ("classic, claude batch, no cache", CLASSIC_NEEDLE, claude[:-1] + ", cache: {mode: off}}", 1),
            ("classic, claude batch + cache", CLASSIC_NEEDLE, claude, 1),
            ("classic, gpt-5-mini batch + cache key", CLASSIC_NEEDLE, gpt, 1),
            ("classic, gpt-5-mini flex", CLASSIC_NEEDLE, flex, 1),
            ("8 questions per context, claude batch + cache", MULTI_NEEDLE, claude, 8),
            (
                "8 questions per context, claude batch + cache, 5-minute writes",
                MULTI_NEEDLE,
                claude[:-1] + ", cache: {ttl: 5m}}",
                8,
            ),
            ("8 questions per context, gpt-5-mini flex", MULTI_NEEDLE, flex, 8),
        ]
        for label, needle, model, per_context in cases:
            depths = DEPTHS if per_context == 1 else DEPTHS[::2]
            name = "bench-" + label.split(",")[0].replace(" ", "-")
            spec = Path(tmp) / f"{abs(hash(label))}.yaml"
            with Emulator(EmulatorConfig(timing=timing)) as emu:  # each case starts with empty caches
                entry = model.replace("ANTHROPIC", emu.anthropic_base_url).replace("OPENAI", emu.openai_base_url)
                spec.write_text(spec_text(name, needle, entry, per_context, LENGTHS, depths))
                started = time.perf_counter()
                ran = pipeline.run(str(spec), Path(tmp) / "out", wait=True)
                seconds = time.perf_counter() - started
            for model_label, row in measure(Path(ran.path)).items():
                print(
                    f"{label}: {model_label}: actual ${row['actual']:.4f} = {row['actual'] / row['list']:.1%} of the "
                    f"live list price ${row['list']:.4f} (plan: ${row['estimate']:.4f} = "
                    f"{row['estimate'] / row['estimate_live']:.1%} of its live estimate, answers at max_tokens; "
                    f"the cached arm alone: {row['cached_actual'] / row['cached_list']:.1%}); "
                    f"{row['read'] / row['input']:.1%} of input tokens read from the cache, "
                    f"{row['written'] / row['input']:.1%} written to it; pass rate cached "
                    f"{row['cached_pass']:.1%} of {row['cached_cells']:.0f}, control {row['control_pass']:.1%} of "
                    f"{row['control_cells']:.0f}; {seconds:.1f} s"
                )


if __name__ == "__main__":
    main()
