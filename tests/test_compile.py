"""The compiler end to end: run directories, reproducibility, provider formats, sharding, costs."""

import filecmp
import json
import re
import subprocess
from pathlib import Path

import pytest
from anthropic.types.messages.batch_create_params import MessageCreateParamsNonStreaming
from anthropic.types.messages.batch_create_params import Request as AnthropicBatchRequest
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import TypeAdapter

from nspec.compiler.context import TEXT_TOLERANCE
from nspec.compiler.run_writer import compile_run, plan
from nspec.errors import CompileError, SpecError
from nspec.spec import load_spec
from tests.conftest import SPECS, shipped_grid, shipped_specs

CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def check_typed_dict(typed_dict, value):
    """Validate ``value`` against an SDK TypedDict: its types (pydantic), and no key it does not declare."""
    TypeAdapter(typed_dict).validate_python(value)
    assert typed_dict.__required_keys__ <= set(value) <= typed_dict.__required_keys__ | typed_dict.__optional_keys__


SMALL = """\
nspec: 1
name: small
seed: 3
haystack: {corpus: austen}
needles:
  - id: magic
    text: "The special magic {city} number is: {number}."
    question: "What is the special magic {city} number?"
    answer: "{number}"
    vars: {city: {choice: cities}, number: {digits: 7}}
grid: {context_lengths: [400, 900], depths: [0, 40, 100], trials: 2, negative_controls: true}
prompt: {system: "Answer briefly.", user: "{haystack}\\n\\n{question}", reserve_tokens: 40}
models:
  - {id: openai/gpt-4.1-mini, params: {temperature: 0}}
  - {id: anthropic/claude-haiku-4-5, prompt: {prefill: "The number is"}}
"""


def compile_spec(path, out, provenance=None):
    loaded = load_spec(str(path))
    return compile_run(loaded.data, loaded.base_dir, out, provenance or {"file": str(path)})


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.fixture
def small(spec_file):
    return spec_file(SMALL)


def test_run_directory_layout(small, tmp_path):
    result = compile_spec(small, tmp_path / "out")
    run = result.path
    assert result.created and run.parent.name == "small" and re.fullmatch(r"[0-9a-f]{12}", run.name)
    assert sorted(p.name for p in run.iterdir()) == ["answers", "cells.jsonl", "manifest.json", "spec.yaml"]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["run_id"] == run.name and manifest["compile_hash"].startswith(run.name)
    cells = read_jsonl(run / "cells.jsonl")
    # 2 models x 2 lengths x (3 depths + 1 negative control) x 2 trials
    assert len(cells) == manifest["totals"]["cells"] == 32
    assert sum(c["negative"] for c in cells) == 8
    shards = sorted((run / "answers" / "requests").iterdir())
    assert [s.name for s in shards] == ["anthropic-claude-haiku-4-5-0001.jsonl", "openai-gpt-4-1-mini-0001.jsonl"]
    lines = [line for s in shards for line in read_jsonl(s)]
    assert sorted(line["custom_id"] for line in lines) == sorted(c["cell_id"] for c in cells)


def test_recompile_is_byte_identical_and_a_no_op(small, tmp_path):
    first = compile_spec(small, tmp_path / "a")
    second = compile_spec(small, tmp_path / "b")
    assert first.path.name == second.path.name
    compare = filecmp.dircmp(first.path, second.path)
    assert not compare.diff_files and not compare.left_only and not compare.right_only
    for sub in ("answers/requests",):
        sub_cmp = filecmp.dircmp(first.path / sub, second.path / sub)
        assert sub_cmp.left_list == sub_cmp.right_list and not sub_cmp.diff_files
        _, mismatch, errors = filecmp.cmpfiles(first.path / sub, second.path / sub, sub_cmp.common_files, shallow=False)
        assert not mismatch and not errors
    again = compile_spec(small, tmp_path / "a")
    assert not again.created and again.path == first.path


def test_a_different_spec_gets_a_different_run_id(spec_file, tmp_path):
    a = compile_spec(spec_file(SMALL, "a.yaml"), tmp_path)
    b = compile_spec(spec_file(SMALL.replace("seed: 3", "seed: 4"), "b.yaml"), tmp_path)
    assert a.path != b.path


def test_cell_records(small, tmp_path):
    run = compile_spec(small, tmp_path).path
    for cell in read_jsonl(run / "cells.jsonl"):
        assert CUSTOM_ID.match(cell["cell_id"])
        assert cell["context_length"]["actual"] <= cell["context_length"]["target"]
        assert cell["context_length"]["target"] - cell["context_length"]["actual"] <= TEXT_TOLERANCE
        if cell["negative"]:
            assert cell["expected"] == [] and cell["needles"] == [] and cell["depth"]["actual"] is None
        else:
            assert re.fullmatch(r"\d{7}", cell["expected"][0])
            assert cell["depth"]["requested"] in (0, 40, 100)
            assert abs(cell["depth"]["actual"] - cell["depth"]["requested"]) < 10


def test_needles_and_negative_controls_in_the_requests(small, tmp_path):
    run = compile_spec(small, tmp_path).path
    cells = {c["cell_id"]: c for c in read_jsonl(run / "cells.jsonl")}
    for shard in (run / "answers" / "requests").iterdir():
        for line in read_jsonl(shard):
            cell = cells[line["custom_id"]]
            body = line.get("body") or line["params"]
            user = next(m["content"] for m in body["messages"] if m["role"] == "user")
            assert user.endswith(cell["question"])
            numbers = re.findall(r"The special magic \w+ number is: (\d{7})\.", user)
            assert numbers == ([] if cell["negative"] else cell["expected"])


def test_same_needles_for_every_model(small, tmp_path):
    """Cells differ from each other, but every model sees the same needle in the same cell (paired comparison)."""
    run = compile_spec(small, tmp_path).path
    by_cell: dict = {}
    for c in read_jsonl(run / "cells.jsonl"):
        if not c["negative"]:
            key = (c["context_length"]["target"], c["depth"]["requested"], c["trial"])
            by_cell.setdefault(key, set()).add(c["expected"][0])
    assert all(len(v) == 1 for v in by_cell.values())
    assert len({next(iter(v)) for v in by_cell.values()}) == len(by_cell)


def test_trials_vary_the_haystack(small, tmp_path):
    run = compile_spec(small, tmp_path).path
    firsts = {}
    for line in read_jsonl(run / "answers/requests/openai-gpt-4-1-mini-0001.jsonl"):
        user = line["body"]["messages"][1]["content"]
        firsts.setdefault(user[:200], 0)
        firsts[user[:200]] += 1
    assert len(firsts) >= 2  # trial 2 starts at another offset


def test_openai_lines_match_the_sdk_types(small, tmp_path):
    run = compile_spec(small, tmp_path).path
    lines = read_jsonl(run / "answers/requests/openai-gpt-4-1-mini-0001.jsonl")
    for line in lines:
        assert set(line) == {"custom_id", "method", "url", "body"}
        assert line["method"] == "POST" and line["url"] == "/v1/chat/completions"
        check_typed_dict(CompletionCreateParamsNonStreaming, line["body"])
        assert line["body"]["model"] == "gpt-4.1-mini"
        assert line["body"]["max_completion_tokens"] == 40 and line["body"]["temperature"] == 0
        assert [m["role"] for m in line["body"]["messages"]] == ["system", "user"]
    assert len({line["custom_id"] for line in lines}) == len(lines)


def test_anthropic_lines_match_the_sdk_types(small, tmp_path):
    run = compile_spec(small, tmp_path).path
    for line in read_jsonl(run / "answers/requests/anthropic-claude-haiku-4-5-0001.jsonl"):
        check_typed_dict(AnthropicBatchRequest, line)
        params = line["params"]
        check_typed_dict(MessageCreateParamsNonStreaming, params)
        assert params["model"] == "claude-haiku-4-5" and params["max_tokens"] == 40
        assert params["system"] == "Answer briefly."
        assert params["messages"][-1] == {"role": "assistant", "content": "The number is"}


def test_forced_small_shards(spec_file, tmp_path):
    spec = spec_file(SMALL + "run: {shard: {max_requests: 3, max_bytes: 20000}}\n")
    run = compile_spec(spec, tmp_path).path
    manifest = json.loads((run / "manifest.json").read_text())
    for model in manifest["models"]:
        assert len(model["shards"]) >= 6
        assert sum(s["requests"] for s in model["shards"]) == model["cells"] == 16
        for shard in model["shards"]:
            data = (run / shard["file"]).read_bytes()
            assert len(data) == shard["bytes"] <= 20000 and data.count(b"\n") == shard["requests"] <= 3
    cells = read_jsonl(run / "cells.jsonl")
    assert {c["shard"] for c in cells} == {s["file"] for m in manifest["models"] for s in m["shards"]}


def test_a_request_over_the_shard_byte_limit_is_an_error(spec_file, tmp_path):
    spec = spec_file(SMALL + "run: {shard: {max_bytes: 2000}}\n")
    with pytest.raises(CompileError, match="over the shard limit of 2,000 bytes"):
        compile_spec(spec, tmp_path)
    assert not any((tmp_path / "small").iterdir())  # nothing half-written is left


def test_cells_beyond_max_context(spec_file, tmp_path):
    too_long = SMALL.replace("{id: openai/gpt-4.1-mini, ", "{id: openai/gpt-4.1-mini, max_context: 500, ")
    with pytest.raises(SpecError) as refused:  # refused with the spec, as validate refuses it
        compile_spec(spec_file(too_long, "a.yaml"), tmp_path)
    assert [str(issue) for issue in refused.value.issues] == [
        "a.yaml:14:44: models[0].max_context: context length 900 exceeds the model's max_context (500); shorten "
        "grid.context_lengths or set run.on_too_long: drop"
    ]
    dropped = compile_spec(spec_file(too_long + "run: {on_too_long: drop}\n", "b.yaml"), tmp_path).path
    manifest = json.loads((dropped / "manifest.json").read_text())
    gpt = manifest["models"][0]
    # 3 depths and a negative control at length 900, in each of 2 trials: the cells a length's drop leaves out.
    assert gpt["cells"] == 8 and gpt["dropped_cells"] == 8 and manifest["totals"]["dropped_cells"] == 8


def test_cost_arithmetic(spec_file):
    spec = SMALL.replace(
        "{id: openai/gpt-4.1-mini, params: {temperature: 0}}",
        "{id: openai/gpt-4.1-mini, price: {input: 2.0, output: 8.0, batch_discount: 0.5}}",
    )
    loaded = load_spec(spec_file(spec))
    result = plan(loaded.data, loaded.base_dir).as_dict()
    gpt, claude = result["models"]
    live = (gpt["input_tokens"] * 2.0 + gpt["output_tokens_max"] * 8.0) / 1e6
    assert gpt["output_tokens_max"] == 16 * 40
    costs = gpt["cost_usd"]
    assert (costs["live"], costs["batch"], costs["known"]) == (round(live, 4), round(live / 2, 4), True)
    # gpt-4.1-mini's cache hits are not discounted in a batch: nothing is shaped, and the run pays the batch price
    assert costs["batch_cache"] is None and costs["run_lane"] == "batch" and costs["cheapest"] == "batch"
    assert claude["cost_usd"]["known"] is True  # from the shipped table


def test_unknown_price_is_unknown_not_zero(spec_file):
    loaded = load_spec(spec_file(SMALL.replace("openai/gpt-4.1-mini", "openai/some-future-model")))
    model = plan(loaded.data, loaded.base_dir).as_dict()["models"][0]
    assert model["cost_usd"]["known"] is False
    assert all(model["cost_usd"][lane] is None for lane in ("live", "batch", "batch_cache", "flex", "run"))


def test_manifest_records_git_state(small, tmp_path, cli):
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "add", "spec.yaml"], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "spec"], check=True)
    result = cli("compile", small, "-o", str(tmp_path / "out"))
    assert result.code == 0
    run = Path(result.out.strip())
    git = json.loads((run / "manifest.json").read_text())["provenance"]["git"]
    assert re.fullmatch(r"[0-9a-f]{40}", git["commit"]) and git["dirty"] is False


def test_compile_cli_prints_the_path_and_is_idempotent(small, tmp_path, cli):
    first = cli("compile", small, "-o", str(tmp_path / "out"))
    assert first.code == 0 and (Path(first.out.strip()) / "manifest.json").is_file()
    second = cli("compile", small, "-o", str(tmp_path / "out"))
    assert second.code == 0 and second.out == first.out
    assert "already compiled" in second.err


def test_compile_error_exits_2(spec_file, cli, tmp_path):
    spec = spec_file(SMALL.replace("{id: openai/gpt-4.1-mini, ", "{id: openai/gpt-4.1-mini, max_context: 500, "))
    result = cli("compile", spec, "-o", str(tmp_path))
    assert result.code == 2
    assert "exceeds the model's max_context (500)" in result.err and "Traceback" not in result.err


def test_plan_cli(small, cli):
    table = cli("plan", small)
    assert table.code == 0
    assert "openai/gpt-4.1-mini" in table.out and "$" in table.out
    data = json.loads(cli("plan", small, "--json").out)
    assert [m["cells"] for m in data["models"]] == [16, 16]
    assert data["models"][1]["tokenizer"] == {"name": "proxy:o200k_base*1", "exact": False, "margin": 0.2}


@pytest.mark.parametrize("spec", shipped_specs(), ids=lambda p: p.name)
def test_every_example_plans(spec, monkeypatch):
    monkeypatch.chdir(SPECS.parent)
    loaded = load_spec(f"specs/{spec.name}")
    result = plan(shipped_grid(spec.name, loaded.data), loaded.base_dir)
    assert all(m["cells"] > 0 and m["input_tokens"] > 0 for m in result.as_dict()["models"])


def test_validate_then_compile_tokenise_the_haystack_once_and_the_runner_keeps_nothing(small, tmp_path, monkeypatch):
    """Trials drawn from offsets tokenise a whole pass of the corpus (Austen: 4 MB): validate and compile in one
    process share it, and once the runner's compile is written no tokenised haystack is held for the later stages."""
    from nspec.compiler import haystack
    from nspec.compiler.tokenizers import TiktokenTokenizer
    from nspec.runners.compiling import compile_spec as runner_compile

    encoded: list[int] = []
    original = TiktokenTokenizer.encode
    monkeypatch.setattr(
        TiktokenTokenizer, "encode", lambda self, text: encoded.append(len(text)) or original(self, text)
    )
    haystack.release_tokenised()
    loaded = load_spec(small)  # validate, fitting the longest length
    compile_run(loaded.data, loaded.base_dir, tmp_path / "first", {})
    longest = max(encoded)
    assert longest > 4_000_000 and encoded.count(longest) == 1  # the pass over the book, tokenised once

    runner_compile(small, tmp_path / "second")
    assert haystack._kept_starts == {}


def test_compile_builds_each_generated_cell_once_and_refuses_as_validate_does(spec_file, tmp_path, monkeypatch):
    """validate builds the first trial's generated contexts; a compile leaves that pass to its own cells, which it
    makes anyway (a RULER sample at 128K is built and counted once, not twice), and refuses what validate refuses."""
    from nspec.compiler.fit.sized import SizedFitter
    from nspec.runners.compiling import compile_spec as runner_compile

    fitted: list[int] = []
    original = SizedFitter.fit
    monkeypatch.setattr(
        SizedFitter, "fit", lambda self, slot, *rest: fitted.append(slot.trial) or original(self, slot, *rest)
    )
    spec = "nspec: 1\nname: walks\ntask: graphwalks\ngrid: {context_lengths: [2000, 3000], trials: 3}\n"
    spec += "models: [{id: openai/gpt-4.1-mini}]\n"
    load_spec(spec_file(spec, "validate.yaml"))
    assert fitted == [0]  # validate: the first trial at the shortest length
    fitted.clear()
    compiled = runner_compile(spec_file(spec, "compile.yaml"), tmp_path)
    cells = (compiled.path / "cells.jsonl").read_text().splitlines()
    assert len(fitted) == len(cells) == 6 and sorted(fitted) == [0, 0, 1, 1, 2, 2]
    too_short = spec.replace("[2000, 3000]", "[400, 3000]").replace("grid:", "prompt: {reserve_tokens: 256}\ngrid:")
    with pytest.raises(SpecError) as refused:
        runner_compile(spec_file(too_short, "short.yaml"), tmp_path)
    [issue] = refused.value.issues
    assert str(issue).startswith("short.yaml:5:25: grid.context_lengths: cell openai-gpt-4-1-mini-")
    assert "the graphwalks task at its smallest size (1) needs more than 144 tokens" in str(issue)
