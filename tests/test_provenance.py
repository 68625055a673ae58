"""No silent substitution, every input traced: a repeated haystack, estimated token counts, a model with no known
price and needles far from their depth are said in plan, manifest and report; lengths are recorded three ways; the
manifest lists every file the compile read, with git state per file."""

import json
import subprocess
from pathlib import Path

from nspec.compiler.run_writer import compile_run, plan
from nspec.compiler.tokenizers import chat_framing, encoding
from nspec.spec import load_spec
from tests.conftest import BASE

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def planned(spec_file, text):
    loaded = load_spec(spec_file(text))
    return plan(loaded.data, loaded.base_dir).as_dict()


def test_a_haystack_shorter_than_the_cell_is_repeated_and_said(spec_file, tmp_path, cli):
    (tmp_path / "hay").mkdir()
    (tmp_path / "hay" / "a.txt").write_text("It was a dark night. The rain fell on the roofs of the town.\n" * 40)
    text = BASE.replace("haystack: {corpus: austen}", "haystack: {files: 'hay/*.txt'}")
    text = text.replace("context_lengths: [1000]", "context_lengths: [500, 4000]")
    result = planned(spec_file, text)
    assert result["haystack"]["cells_repeating"] == 1 and result["haystack"]["max_uses_per_cell"] > 1
    (note,) = [n for n in result["fallbacks"] if n["kind"] == "repeated_haystack"]
    assert note["cells"] == 1 and "1 of 2 cells hold a haystack source more than once" in note["message"]
    out = cli("plan", "spec.yaml")
    assert out.code == 0 and "note: openai/gpt-4.1-mini: 1 of 2 cells hold a haystack source" in out.out
    run = Path(cli("compile", "spec.yaml", "-o", "out").out.strip())
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    assert sorted(c["haystack_uses"] for c in cells) == [1, result["haystack"]["max_uses_per_cell"]]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["fallbacks"] == result["fallbacks"]
    assert manifest["haystack"]["files"][0]["max_uses_per_cell"] == result["haystack"]["max_uses_per_cell"]
    # Refused when the spec says so: exit 2, naming the cell.
    spec_file(text.replace("haystack: {files: 'hay/*.txt'}", "haystack: {files: 'hay/*.txt', repeat: error}"))
    refused = cli("compile", "spec.yaml", "-o", "out2")
    assert refused.code == 2 and "so they would repeat" in refused.err and "haystack.repeat is `error`" in refused.err


def test_a_million_token_cell_fits_austen_and_the_king_james_bible_without_repeating(spec_file):
    text = BASE.replace("context_lengths: [1000]", "context_lengths: [1000000]")
    text = text.replace("[{id: openai/gpt-4.1-mini}]", "[{id: openai/gpt-4.1-mini, max_context: 1047576}]")
    alone = planned(spec_file, text)
    assert alone["haystack"]["cells_repeating"] == 1  # Austen alone holds 953K tokens
    both = planned(spec_file, text.replace("{corpus: austen}", "{corpus: [austen, kjv]}"))
    assert both["haystack"]["cells_repeating"] == 0 and both["fallbacks"] == []


def test_the_bundled_corpora(spec_file):
    result = planned(spec_file, BASE.replace("{corpus: austen}", "{corpus: [austen, kjv]}"))
    files = result["haystack"]["files"]
    assert len(files) == 6 + 66 and files[0]["name"] == "austen/emma.txt.gz"
    assert files[6]["name"] == "kjv/01-genesis.txt.gz" and files[-1]["name"] == "kjv/66-revelation.txt.gz"


def test_lengths_are_recorded_three_ways(spec_file, tmp_path):
    text = BASE.replace(
        "models: [{id: openai/gpt-4.1-mini}]",
        "models: [{id: openai/gpt-4.1-mini}, {id: openai/gpt-4}, "
        "{id: anthropic/claude-haiku-4-5, tokenizer: {name: proxy, factor: 1.25}}]",
    )
    loaded = load_spec(spec_file(text))
    run = compile_run(loaded.data, loaded.base_dir, tmp_path / "out", {}).path
    cells = {c["model"]: c for c in map(json.loads, (run / "cells.jsonl").read_text().splitlines())}
    requests = {}
    for shard in (run / "answers" / "requests").iterdir():
        line = json.loads(shard.read_text())
        requests[line["custom_id"]] = line.get("body") or line["params"]
    o200k = encoding("o200k_base")
    for model, cell in cells.items():
        length = cell["context_length"]
        body = requests[cell["cell_id"]]
        texts = [m["content"] for m in body["messages"]] + ([body["system"]] if "system" in body else [])
        assert length["characters"] == sum(len(t) for t in texts)
        assert length["o200k"] == chat_framing(len(texts)) + sum(len(o200k.encode(t)) for t in texts), model
    assert (
        cells["openai/gpt-4.1-mini"]["context_length"]["o200k"]
        == cells["openai/gpt-4.1-mini"]["context_length"]["prompt"]
    )
    gpt4 = cells["openai/gpt-4"]["context_length"]
    assert gpt4["counted_by"] == "cl100k_base" and gpt4["o200k"] != gpt4["prompt"]
    claude = cells["anthropic/claude-haiku-4-5"]["context_length"]
    assert claude["counted_by"] == "proxy:o200k_base*1.25" and claude["margin"] == 0.2
    assert claude["prompt"] == -(-claude["o200k"] * 125 // 100)  # the proxy: o200k times its factor, rounded up


def test_a_proxy_counted_model_is_kept_inside_max_context_by_its_margin(spec_file):
    text = BASE.replace(
        "models: [{id: openai/gpt-4.1-mini}]",
        "models: [{id: anthropic/claude-haiku-4-5, max_context: 1000, tokenizer: {name: proxy, margin: 0.25}}]",
    ).replace("context_lengths: [1000]", "context_lengths: [600, 1000]")
    result = planned(spec_file, text)
    (note,) = [n for n in result["fallbacks"] if n["kind"] == "estimated_tokens"]
    assert note["cells"] == 1
    assert "up to 25% higher; 1 cells were fitted 25% inside max_context (1,000)" in note["message"]


def test_the_margin_shortens_cells_so_the_real_count_still_fits(spec_file, tmp_path):
    text = BASE.replace(
        "models: [{id: openai/gpt-4.1-mini}]",
        "models: [{id: anthropic/claude-haiku-4-5, max_context: 1000, tokenizer: {name: proxy, margin: 0.25}}]",
    )
    loaded = load_spec(spec_file(text))
    run = compile_run(loaded.data, loaded.base_dir, tmp_path / "out", {}).path
    (cell,) = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    length, reserve = cell["context_length"], 300
    assert length["target"] == 1000 and length["fitted_to"] == int(700 / 1.25) + reserve
    assert length["prompt"] * 1.25 + reserve <= 1000  # even 25% more real tokens fit the window


def test_unknown_prices_are_said_and_look_alikes_are_not_priced(spec_file, cli):
    text = BASE.replace("openai/gpt-4.1-mini", "openai/gpt-4.1-mni")
    result = planned(spec_file, text)
    costs = result["models"][0]["cost_usd"]
    assert not costs["known"] and costs["live"] is None and costs["batch"] is None and costs["run"] is None
    assert [n["kind"] for n in result["fallbacks"]] == ["unknown_price"]
    validated = cli("validate", "spec.yaml")
    assert validated.code == 0
    assert (
        "warning: spec.yaml:11:15: models[0].id: no price is known for 'openai/gpt-4.1-mni', so its cost will show as "
        "unknown; did you mean 'openai/gpt-4.1-mini'"
    ) in validated.err
    warned = json.loads(cli("validate", "spec.yaml", "--json").out)["files"][0]["warnings"]
    assert warned[0]["path"] == "models[0].id"
    # A dated snapshot of a listed model is that model.
    dated = planned(spec_file, BASE.replace("openai/gpt-4.1-mini", "openai/gpt-4.1-mini-2025-04-14"))
    assert dated["models"][0]["cost_usd"]["known"] and dated["fallbacks"] == []


def test_needles_far_from_their_depth_are_said(spec_file):
    text = BASE.replace("context_lengths: [1000]", "context_lengths: [120]")
    result = planned(spec_file, text.replace('{question}"}', '{question}", reserve_tokens: 20}'))
    notes = [n for n in result["fallbacks"] if n["kind"] == "placement"]
    assert notes and "sit more than 5 points from their requested depth" in notes[0]["message"]


def test_the_manifest_traces_every_input_file_and_which_are_dirty(spec_file, tmp_path, cli):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "base.yaml").write_text("nspec: 1\nseed: 5\n")
    (tmp_path / "hay").mkdir()
    (tmp_path / "hay" / "a.txt").write_text("It was a dark night. The rain fell on the roofs of the town.\n" * 200)
    text = "include: shared/base.yaml\n" + BASE.replace("haystack: {corpus: austen}", "haystack: {files: 'hay/*'}")
    spec_file(text)
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run([*GIT, "add", "."], check=True)
    subprocess.run([*GIT, "commit", "-qm", "spec"], check=True)
    clean = json.loads((Path(cli("compile", "spec.yaml", "-o", "out").out.strip()) / "manifest.json").read_text())
    provenance = clean["provenance"]
    assert [(f["path"], f["role"]) for f in provenance["files"]] == [
        ("spec.yaml", "spec"),
        ("shared/base.yaml", "include"),
        ("hay/a.txt", "haystack"),
    ]
    assert provenance["git"]["dirty"] is False and all(f["git"]["dirty"] is False for f in provenance["files"])
    assert provenance["files"][2]["sha256"] == clean["haystack"]["files"][0]["sha256"]
    # Editing an included file: a new run, and dirty — naming the file.
    (tmp_path / "shared" / "base.yaml").write_text("nspec: 1\nseed: 6\n")
    edited = json.loads((Path(cli("compile", "spec.yaml", "-o", "out").out.strip()) / "manifest.json").read_text())
    assert edited["run_id"] != clean["run_id"] and edited["provenance"]["git"]["dirty"] is True
    assert [f["path"] for f in edited["provenance"]["files"] if f["git"]["dirty"]] == ["shared/base.yaml"]
    line = cli("plan", "spec.yaml").out
    assert f"inputs: 1 spec, 1 include, 1 haystack at git {clean['provenance']['git']['commit'][:12]}, dirty: " in line
    assert "shared/base.yaml" in line
    # A data file git does not have (untracked) is dirty too: the commit cannot reproduce it.
    (tmp_path / "hay" / "b.txt").write_text("Another night came. The wind rose over the hills of the north.\n" * 50)
    added = json.loads((Path(cli("compile", "spec.yaml", "-o", "out").out.strip()) / "manifest.json").read_text())
    assert [f["git"]["dirty"] for f in added["provenance"]["files"] if f["role"] == "haystack"] == [False, True]
