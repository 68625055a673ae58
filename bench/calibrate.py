"""`nspec calibrate` against `nspec emulator` (whose count_tokens counts with cl100k_base, unlike nspec's o200k proxy):
counts asked per cell for a 15 by 15 grid (plus negative controls) with a fixed needle and with drawn values, up to
128K tokens, the time it takes, and how the calibrated cells compare with the emulator's own count of each request
and with their target length.

Run: .venv/bin/python bench/calibrate.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nspec.compiler.run_writer import compile_run  # noqa: E402
from nspec.runners.calibrate import calibrate  # noqa: E402
from nspec.runners.emulator import Emulator, EmulatorConfig  # noqa: E402
from nspec.runners.emulator.generation import anthropic_prompt_tokens  # noqa: E402
from nspec.spec import load_spec  # noqa: E402

LENGTHS = [1000, 2000, 4000, 6000, 8000, 12000, 16000, 24000, 32000, 48000, 64000, 80000, 96000, 112000, 128000]
DEPTHS = [round(100 * i / 14, 2) for i in range(15)]
NEEDLES = {
    "fixed needle": (
        '  - {text: "The special magic number is: 4815162.", question: "What is the special magic number?", '
        'answer: "4815162"}'
    ),
    "drawn values": (
        '  - {text: "The special magic {city} number is: {number}.", question: "What is the special magic {city} '
        'number?", answer: "{number}", vars: {city: {choice: cities}, number: {digits: 7}}}'
    ),
}


def spec_text(needle: str, base_url: str) -> str:
    return f"""nspec: 1
name: bench-calibrate
seed: 5
haystack: {{corpus: [austen, kjv], vary: none}}
needles:
{needle}
grid: {{context_lengths: {LENGTHS}, depths: {DEPTHS}, trials: 1, negative_controls: true}}
prompt: {{user: "{{haystack}}\\n\\nAnswer from the text above. {{question}}", reserve_tokens: 100}}
models:
  - {{id: anthropic/claude-sonnet-4-5, base_url: "{base_url}"}}
"""


def main() -> None:
    os.environ.setdefault("ANTHROPIC_API_KEY", "bench")
    with Emulator(EmulatorConfig()) as emu, tempfile.TemporaryDirectory() as tmp:
        for label, needle in NEEDLES.items():
            folder = Path(tmp) / label.replace(" ", "-")
            folder.mkdir()
            spec = folder / "spec.yaml"
            spec.write_text(spec_text(needle, emu.anthropic_base_url))
            began = time.perf_counter()
            (model,) = calibrate(str(spec)).models
            seconds = time.perf_counter() - began
            loaded = load_spec(str(spec))
            began = time.perf_counter()
            run = compile_run(loaded.data, loaded.base_dir, folder / "out", {}, counts=loaded.counts).path
            compile_seconds = time.perf_counter() - began
            requests = {}
            for shard in (run / "answers" / "requests").iterdir():
                for raw in shard.read_text().splitlines():
                    line = json.loads(raw)
                    requests[line["custom_id"]] = line
            equal = short = 0
            worst = 0
            for raw in (run / "cells.jsonl").read_text().splitlines():
                cell = json.loads(raw)
                length = cell["context_length"]
                equal += length["prompt"] == anthropic_prompt_tokens(requests[cell["cell_id"]]["params"])
                gap = length["target"] - length["actual"]
                short += gap >= 0
                worst = max(worst, gap)
            size = (folder / "spec.counts.json").stat().st_size
            print(
                f"{label}: {model.cells} cells, {model.asked} counts asked ({model.asked / model.cells:.2f} per cell), "
                f"composition {model.composition} on {model.checked} cells, calibrate {seconds:.1f} s, compile "
                f"{compile_seconds:.1f} s; {equal}/{model.cells} cells' counts equal the emulator's; {short}/"
                f"{model.cells} within their length, at most {worst} tokens short; counts file {size / 1024:.0f} KB"
            )


if __name__ == "__main__":
    main()
