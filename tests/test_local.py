"""The local engine with the real embedded model (gemma-3-270m on llama.cpp): short prompts, a few seconds each."""

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path

import pytest

from nspec.errors import UserError
from nspec.runners.providers import local
from nspec.runners.providers.local import EngineError, completion_prompt, engine, model_file
from nspec.runners.providers.openai import parse_result as parse_openai
from tests.contract import assert_run_valid

ROOT = Path(__file__).resolve().parent.parent

NEEDLE = "The special magic number is: 4817203."
HAYSTACK = (
    "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, seemed to unite some "
    f"of the best blessings of existence. {NEEDLE} She had lived nearly twenty-one years in the world with very "
    "little to distress or vex her."
)

# Small and quick: one length, two depths and a negative control.
SMALL = """\
nspec: 1
name: small
seed: 3
haystack: {corpus: austen}
needles:
  - text: "The special magic number is: {n}."
    question: "What is the special magic number?"
    answer: "{n}"
    vars: {n: {digits: 7}}
grid: {context_lengths: [300], depths: [0, 100], negative_controls: true}
prompt: {user: "{haystack}\\n\\n{question}", prefill: "The special magic number is:", reserve_tokens: 16}
models: [{id: local/gemma-3-270m, params: {temperature: 0, max_tokens: 8}}]
scoring:
  - rails: {not_found: ["not found"]}
"""


def chat(user, prefill="The special magic number is:", **params):
    messages = [{"role": "user", "content": user}]
    if prefill is not None:
        messages.append({"role": "assistant", "content": prefill})
    return {"model": "gemma-3-270m", "messages": messages, "temperature": 0, "max_tokens": 8, **params}


def test_rendering_for_a_base_model():
    system = {"role": "system", "content": "Read this."}
    user = {"role": "user", "content": "Text.\n\nWhat is it?"}
    assert completion_prompt([system, user, {"role": "assistant", "content": "It is"}]) == (
        "Read this.\n\nText.\n\nWhat is it?\n\nIt is"
    )
    assert completion_prompt([user]) == "Text.\n\nWhat is it?\n\nAnswer:"
    turns = [user, {"role": "assistant", "content": "a"}, {"role": "user", "content": "Sure?"}]
    assert completion_prompt(turns) == "Text.\n\nWhat is it?\n\nAnswer: a\n\nSure?\n\nAnswer:"
    blocks = [{"role": "user", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]}]
    assert completion_prompt(blocks) == "AB\n\nAnswer:"
    with pytest.raises(EngineError, match="at least one message"):
        completion_prompt([])


def test_the_real_model_finds_a_needle_in_a_short_prompt():
    model = engine("gemma-3-270m")
    body = chat(f"{HAYSTACK}\n\nWhat is the special magic number?")
    completion = model.complete(body, "cell-1")
    assert completion["object"] == "chat.completion"
    assert "4817203" in completion["choices"][0]["message"]["content"]
    # The compiler's count of this request is the engine's own.
    tokenizer = local.tokenizer("gemma-3-270m")
    texts = [m["content"] for m in body["messages"]]
    expected = tokenizer.framing(2, True) + sum(tokenizer.count(t) for t in texts)
    assert completion["usage"]["prompt_tokens"] == expected
    assert completion["usage"]["completion_tokens"] <= 8
    assert model.complete(body, "cell-1")["choices"] == completion["choices"]  # greedy: the same answer again
    bare = chat(HAYSTACK, prefill=None, max_tokens=1)  # no prefill: the prompt ends with the `Answer:` cue
    used = model.complete(bare, "cell-2")["usage"]["prompt_tokens"]
    assert used == tokenizer.framing(1, False) + tokenizer.count(HAYSTACK)


def test_prefix_order_sends_prompts_sharing_a_prefix_together():
    haystack = "".join(f"Line {i} of a haystack shared by several prompts.\n" for i in range(200))  # ~10 KB

    def line(cid, text):
        return {"custom_id": cid, "body": chat(text)}

    lines = [
        line("a1", "Other text, shorter than a chunk."),
        line("h-early", haystack[:4000] + "The needle." + haystack[4000:]),
        line("b", "Yet other text."),
        line("h-late", haystack[:9000] + "The needle." + haystack[9000:]),
        line("a2", "Other text, shorter than a chunk."),
        line("bad", ""),
        line("h-end", haystack + "The needle."),
    ]
    lines[5]["body"]["messages"] = []  # a line the engine refuses goes first, and is answered with its error
    order = [x["custom_id"] for x in sorted(lines, key=local.prefix_key)]
    assert order[0] == "bad"
    assert order.index("a2") == order.index("a1") + 1  # the same prompt: the same key, in compiled order
    # The haystack's prompts follow one another, the two sharing the most (9,000 characters) side by side.
    at = sorted(order.index(cid) for cid in ("h-early", "h-late", "h-end"))
    assert at == list(range(at[0], at[0] + 3)), order
    assert abs(order.index("h-late") - order.index("h-end")) == 1
    prompt = local.completion_prompt(lines[6]["body"]["messages"])
    assert len(local.prefix_key(lines[6])) == 8 * -(-len(prompt) // local.KEY_CHUNK)


# Sentences of a haystack: prompts made of them share a prefix up to their needle.
SENTENCES = [f"Sentence {i} of the long and quiet story about Highbury, its people and their days." for i in range(6)]


def needle_prompt(at: int | None, number: str) -> str:
    sentences = list(SENTENCES)
    if at is not None:
        sentences.insert(at, f"The special magic number is: {number}.")
    return " ".join(sentences) + "\n\nWhat is the special magic number?"


def test_answers_do_not_depend_on_prefix_reuse_nor_on_what_the_cache_held(monkeypatch):
    """Prompts sharing prefixes that end inside micro-batches, in prefix order, on an engine evaluating 32 tokens at
    a time (prompts of ~130 tokens cross three boundaries): with reuse each reads from the cache the whole
    micro-batches it shares with the one before and evaluates the rest in a fresh read's micro-batches. The answers
    and every log-probability are those of the prompts read whole, those of a run resumed from another cache, and
    those of an engine loaded again with a larger context."""
    model = local.Engine(model_file("gemma-3-270m"), ubatch=32, context=128)
    lines = [
        {"custom_id": f"c{at}", "body": chat(needle_prompt(at, n), max_tokens=3, logprobs=True)}
        for at, n in [(5, "7301944"), (2, "2184096"), (4, "6618023")]
    ]
    ordered = sorted(lines, key=local.prefix_key)

    def answers(lines):
        return [model.complete(line["body"], line["custom_id"])["choices"] for line in lines]

    tokens = [[t for t, _ in model.tokenize(completion_prompt(line["body"]["messages"]))] for line in ordered]
    # The tokens each prompt shares with the one before, BOS included.
    shared = [1 + next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y) for a, b in pairwise(tokens)]
    assert min(shared) > 32 and all(n % 32 for n in shared)  # each shares a prefix that ends inside a micro-batch
    reused = answers(ordered)
    assert model.reused_tokens == sum(n // 32 * 32 for n in shared)  # whole micro-batches only
    assert reused[0][0]["logprobs"]["content"][0]["logprob"] < 0
    monkeypatch.setattr(model, "reuse", False)
    assert answers(ordered) == reused
    assert model.reused_tokens == sum(n // 32 * 32 for n in shared)  # every prompt read whole
    monkeypatch.setattr(model, "reuse", True)
    model.complete(chat(needle_prompt(6, "1234567")), "other")  # a resumed run: the cache holds another prompt
    assert answers(ordered[1:]) == reused[1:]
    longer = {**ordered[0]["body"], "max_tokens": 150, "stop": ["."]}  # the prompt and 150 tokens: past 128
    read = model.reused_tokens
    grown = model.complete(longer, ordered[0]["custom_id"])["choices"][0]
    assert model.context == 512 and model.reused_tokens == read  # loaded again: its cache new, the prompt read whole
    assert grown["logprobs"]["content"][:3] == reused[0][0]["logprobs"]["content"]


def test_several_slots_share_the_trained_context():
    """With two slots their requests run at once in one context: the engine is loaded with the trained context,
    not one sized to a prompt (two prompts that each fit 256 tokens overflow it together)."""
    model = local.Engine(model_file("gemma-3-270m"), slots=2, context=256)
    assert model.context == model.trained == 32_768 and not model.reuse
    body = chat(needle_prompt(5, "4021977"), max_tokens=20)
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(model.complete, [body, body], ["s1", "s2"]))
    assert all(d["usage"]["total_tokens"] <= 256 for d in done)
    assert sum(d["usage"]["total_tokens"] for d in done) > 256


# The growth of a process's peak memory when its engine is loaded again with a larger context.
GROWN_PEAK = """
import json, resource, sys
from nspec.runners.providers.local import Engine, model_file
def peak():  # bytes
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
model = Engine(model_file("gemma-3-270m"), context=128)
small, large = map(json.loads, sys.argv[1:])
model.complete(small, "first")
before = peak()
model.complete(large, "grow")
print(model.context, peak() - before)
"""


def test_an_engine_loaded_again_lets_the_model_before_go_first():
    """Loading the model again with a larger context lets the one loaded before go first: held both at once, the
    process would take the memory of two models at its peak (320 MB more here; gigabytes for a larger model)."""
    small, large = chat("Hi", max_tokens=1), chat(needle_prompt(5, "4021977"), max_tokens=3)
    grown = subprocess.run(
        [sys.executable, "-c", GROWN_PEAK, json.dumps(small), json.dumps(large)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    context, growth = map(int, grown.stdout.split())
    assert context == 256  # loaded again
    assert growth < 150e6  # bytes: its larger cache, not a second model


def test_a_length_past_the_trained_context_is_refused_as_one_past_max_context(cli, tmp_path):
    """The engine cannot load more than the context its model was trained for (32,768 tokens here, in its file): a
    grid length past it is refused by validate at the model, as one past `max_context` is, and its cells are dropped
    under `run.on_too_long: drop`; a `max_context` past it is refused at its key."""
    spec, longer = tmp_path / "long.yaml", SMALL.replace("context_lengths: [300]", "context_lengths: [300, 40000]")
    spec.write_text(longer)
    refused = cli("validate", str(spec))
    assert refused.code == 2
    assert "models[0].id: context length 40000 exceeds the model's context window (32,768" in refused.err
    spec.write_text(SMALL.replace("{id: local/gemma-3-270m, ", "{id: local/gemma-3-270m, max_context: 40000, "))
    refused = cli("validate", str(spec))
    assert refused.code == 2
    assert "models[0].max_context: 40000 exceeds the context the model was trained for (32,768)" in refused.err
    spec.write_text(longer + "run: {on_too_long: drop}\n")
    compiled = cli("compile", str(spec), "-o", str(tmp_path / "out"))
    assert compiled.code == 0, compiled.err
    (manifest,) = (tmp_path / "out").glob("*/*/manifest.json")
    model = json.loads(manifest.read_text())["models"][0]
    assert model["cells"] == 3 and model["dropped_cells"] == 3  # both depths and the control at 40,000


def test_output_lines_are_openai_batch_output():
    model = engine("gemma-3-270m")
    ok = model.output_line({"custom_id": "a", "body": chat(f"{HAYSTACK}\n\nWhat is the special magic number?")})
    assert ok["response"]["status_code"] == 200 and ok["error"] is None
    outcome = parse_openai(ok)
    assert outcome.status == "ok" and "4817203" in outcome.text and outcome.input_tokens > 50
    bad = model.output_line({"custom_id": "b", "body": chat("Hi", response_format={"type": "json_object"})})
    outcome = parse_openai(bad)
    assert bad["response"]["status_code"] == 400
    assert outcome.status == "error" and not outcome.retryable
    assert outcome.error == {
        "code": "unsupported_parameter",
        "message": "the local engine does not support response_format",
    }


@pytest.mark.parametrize(
    ("body", "prompt"),
    [
        pytest.param(None, None, id="no body"),
        pytest.param(5, None, id="a body that is no object"),
        pytest.param({"messages": "Hi"}, None, id="messages that are no list"),
        pytest.param({"messages": [5]}, None, id="a message that is no object"),
        pytest.param({**chat("Hi"), "max_tokens": "many"}, "Hi", id="max_tokens no number"),
        pytest.param({**chat("Hi"), "logprobs": True, "top_logprobs": "all"}, "Hi", id="top_logprobs no number"),
        pytest.param({**chat("Hi"), "seed": 2**70}, "Hi", id="a seed past 64 bits"),
    ],
)
def test_a_line_that_is_no_chat_request_is_answered_with_its_error(body, prompt):
    """A request line edited by hand into no chat request is answered with a 400 result, as a provider would answer
    it, not a crash of the run; when its prompt cannot be read, its key (empty) sends it first."""
    line = {"custom_id": "x"} if body is None else {"custom_id": "x", "body": body}
    assert local.prefix_key(line) == (b"" if prompt is None else local.prefix_key({"body": chat(prompt)}))
    answered = engine("gemma-3-270m").output_line(line)
    assert answered["response"]["status_code"] == 400
    assert parse_openai(answered).error["code"] == "invalid_request"


@pytest.mark.parametrize(
    ("budget", "limit"),
    [("max_tokens", 0), ("max_tokens", -1), ("max_completion_tokens", 0), ("max_completion_tokens", -1)],
)
def test_an_answer_budget_under_one_token_is_answered_as_openai_answers_it(budget, limit):
    """A budget `validate` refuses, edited into a request line, is refused as OpenAI refuses it, not handed to
    llama.cpp (where -1 is no limit); `max_completion_tokens` is the budget where both are given."""
    answered = engine("gemma-3-270m").output_line({"custom_id": "x", "body": chat("Hi", **{budget: limit})})
    assert answered["response"]["status_code"] == 400
    assert parse_openai(answered).error == {
        "code": "invalid_request",
        "message": f"Invalid '{budget}': integer below minimum value. Expected a value >= 1, but got {limit} instead.",
    }


def test_sampling_without_a_seed_is_reproducible_per_request():
    model = engine("gemma-3-270m")
    body = chat("Once upon a time", prefill=None, temperature=1.0, max_tokens=6)
    first = model.complete(body, "cell-7")["choices"][0]["message"]["content"]
    assert model.complete(body, "cell-7")["choices"][0]["message"]["content"] == first


def test_tokenizer_is_exact_and_byte_faithful():
    tokenizer = local.tokenizer("gemma-3-270m")
    text = "It is a truth universally acknowledged, that a single man — in possession of a good fortune. é\n\nNext"
    ids = tokenizer.encode(text)
    assert tokenizer.exact and tokenizer.name == "local:gemma-3-270m"
    assert sum(tokenizer.byte_lengths[i] for i in ids) == len(text.encode())
    assert tokenizer.count(text) == len(ids)


def test_model_names_and_files():
    path = model_file("gemma-3-270m")
    assert path.name == "gemma-3-270m-q4_k_m.gguf" and path.parent == Path(os.environ["NSPEC_CACHE_DIR"])
    assert path.with_name(path.name + ".sha256").read_text().split()[1] == str(path.stat().st_size)
    assert model_file("gemma-3-270m") == path  # found again, not assembled again
    assert model_file(str(path)) == path  # any GGUF file by path
    with pytest.raises(UserError, match="unknown local model; use local/gemma-3-270m"):
        model_file("llama-9")
    with pytest.raises(UserError, match="no such model file"):
        model_file("missing.gguf")


def test_missing_runtime_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # as if not installed
    with pytest.raises(UserError, match=r"xllamacpp\): pip install 'needlespec\[local\]'"):
        local.Engine(model_file("gemma-3-270m"))


def nspec(*args, cwd, failpoint=""):
    env = {**os.environ, "NSPEC_FAILPOINT": failpoint}
    return subprocess.run(
        [sys.executable, "-m", "nspec", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600
    )


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow  # the same resume as a live run's (tests/test_runners.py), with the real model: 20 s of two cores
def test_a_killed_local_run_resumes_where_it_stopped(tmp_path):
    (tmp_path / "spec.yaml").write_text(SMALL)
    killed = nspec("run", "spec.yaml", "--wait", cwd=tmp_path, failpoint="live-result")
    assert killed.returncode == -9, killed.stderr
    (run,) = (tmp_path / "outputs" / "small").iterdir()
    before = lines(run / "answers" / "results.jsonl")
    assert len(before) == 1  # killed right after the first answer was written
    done = nspec("run", "spec.yaml", "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    after = lines(run / "answers" / "results.jsonl")
    cells = lines(run / "cells.jsonl")
    assert sorted(r["cell_id"] for r in after) == sorted(c["cell_id"] for c in cells)  # one result per cell
    assert after[0] == before[0]  # the answer from before the kill was kept, not asked again
    assert all(r["source"] == {"kind": "local"} and r["status"] == "ok" for r in after)
    found = {r["cell_id"]: r["text"] for r in after}
    for cell in cells:
        if not cell["negative"]:
            assert cell["expected"][0] in found[cell["cell_id"]]
    # The resumed run read its prompts from another cache state than an uninterrupted one: the same answers.
    whole = tmp_path / "whole"
    whole.mkdir()
    (whole / "spec.yaml").write_text(SMALL)
    assert nspec("run", "spec.yaml", "--wait", cwd=whole).returncode == 0
    (uninterrupted,) = (whole / "outputs" / "small").iterdir()
    assert {r["cell_id"]: r["text"] for r in lines(uninterrupted / "answers" / "results.jsonl")} == found


def compiled_lines(spec, base_dir, tmp_path):
    from nspec.compiler.run_writer import compile_run

    run = compile_run(spec, base_dir, str(tmp_path / spec["name"]), {}).path
    return [line for shard in (run / "answers" / "requests").iterdir() for line in lines(shard)]


@pytest.mark.slow  # the quickstart's 12 prompts (28K tokens) twice and RULER trials: a few minutes of two cores
def test_quickstart_and_ruler_answers_do_not_depend_on_prefix_reuse(tmp_path, monkeypatch):
    from nspec.spec import load_spec

    quickstart = load_spec(str(ROOT / "specs" / "quickstart.yaml"))
    ruler = load_spec(str(ROOT / "specs" / "ruler" / "local.yaml"))
    ruler.data["grid"] = {**ruler.data["grid"], "context_lengths": [1024], "trials": 3}
    lines = [line for loaded in (quickstart, ruler) for line in compiled_lines(loaded.data, loaded.base_dir, tmp_path)]
    ordered = sorted(lines, key=local.prefix_key)
    model = engine("gemma-3-270m")

    def answers():
        bodies = {line["custom_id"]: {**line["body"], "logprobs": True} for line in ordered}
        return {cid: model.complete(body, cid)["choices"] for cid, body in bodies.items()}

    before = model.reused_tokens
    reused = answers()
    assert model.reused_tokens - before >= 4_096  # the quickstart's cells of one length share their haystack
    monkeypatch.setattr(model, "reuse", False)
    assert answers() == reused  # the answers and every log-probability


@pytest.mark.parametrize(
    "lengths",
    [pytest.param("[500]", id="one short length"), pytest.param(None, id="whole", marks=pytest.mark.slow)],
)
def test_quickstart_end_to_end(tmp_path, cli, lengths):
    """The README's first command, in-process: a real model's answers and the full report. The default run asks
    the quickstart at one short length, both ends and its negative control; the whole grid runs under `-m slow`."""
    spec = ROOT / "specs" / "quickstart.yaml"
    if lengths is not None:
        text = spec.read_text().replace("context_lengths: [1000, 2000, 4000]", f"context_lengths: {lengths}")
        text = text.replace("depths: [0, 50, 100]", "depths: [0, 100]")
        spec = tmp_path / "quickstart.yaml"
        spec.write_text(text)
    result = cli("run", str(spec), "--wait", "--out", str(tmp_path / "out"))
    assert result.code == 0, result.err
    report = Path(result.out.strip().splitlines()[-1].removeprefix("report: "))
    assert report.name == "index.html" and report.is_file()
    run = report.parent.parent
    cells = {c["cell_id"]: c for c in lines(run / "cells.jsonl")}
    answers = lines(run / "answers" / "results.jsonl")
    assert len(cells) == len(answers) == (3 if lengths else 12)
    compiled = [line for shard in sorted((run / "answers" / "requests").iterdir()) for line in lines(shard)]
    sent = [line["custom_id"] for line in sorted(compiled, key=local.prefix_key)]
    assert [a["cell_id"] for a in answers] == sent != [line["custom_id"] for line in compiled]  # in prefix order
    for answer in answers:  # counted exactly: the engine saw as many prompt tokens as compiled
        cell = cells[answer["cell_id"]]
        assert cell["tokens_exact"] and answer["usage"]["input_tokens"] == cell["context_length"]["prompt"]
        assert cell["context_length"]["prompt"] + 16 <= cell["context_length"]["target"]
    scores = lines(run / "scores.jsonl")
    needles = [s for s in scores if not cells[s["cell_id"]]["negative"]]
    assert sum(s["verdict"] == "pass" for s in needles) >= len(needles) - 1  # all of them on the reference machine
    summary = (report.parent / "summary.csv").read_text()
    assert "local/gemma-3-270m" in summary
    assert_run_valid(run)  # a real model's run meets the run-directory contract


def test_vet_asks_the_local_model(spec_file, cli):
    result = cli("vet", spec_file(SMALL), "--trials", "1", "--json")
    assert result.code == 0, result.err
    (row,) = json.loads(result.out)
    assert row["model"] == "local/gemma-3-270m" and row["asked"] == 1 and row["passed"] == 1


def test_emulator_answers_with_the_local_model(emulator, api_keys, tmp_path, cli):
    from nspec.runners.emulator.config import Responder

    emu = emulator(responder=Responder(kind="local"))
    spec = SMALL.replace(
        "models: [{id: local/gemma-3-270m, params: {temperature: 0, max_tokens: 8}}]",
        f'models: [{{id: anthropic/claude-haiku-4-5, mode: batch, base_url: "{emu.anthropic_base_url}", '
        "params: {max_tokens: 8}}]",  # a model that continues the prefill, as the local model does
    )
    (tmp_path / "spec.yaml").write_text(spec)
    compiled = cli("compile", str(tmp_path / "spec.yaml"), "--out", str(tmp_path / "out"))
    run = compiled.out.strip().splitlines()[-1]
    assert cli("submit", run).code == 3
    emu.clock.advance(600)
    deadline = time.monotonic() + 120  # a real model answers for the emulator: its worker takes a while
    while (collected := cli("collect", run)).code == 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert collected.code == 0, collected.err
    answers = lines(Path(run) / "answers" / "results.jsonl")
    cells = {c["cell_id"]: c for c in lines(Path(run) / "cells.jsonl")}
    assert len(answers) == 3 and all(a["source"]["kind"] == "batch" for a in answers)
    for answer in answers:
        cell = cells[answer["cell_id"]]
        if not cell["negative"]:
            assert cell["expected"][0] in answer["text"]  # a real model's answer, through the batch API
