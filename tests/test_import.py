"""The scale-out path: `vllm run-batch` reads the compiled OpenAI shards and writes one output file, in input order,
errors inline; `nspec collect RUN --from FILE` makes it the run's results."""

import json
import os

from nspec.compiler.run_writer import compile_run
from nspec.spec import load_spec

SPEC = """\
nspec: 1
name: gpu
seed: 5
haystack: {corpus: austen, vary: none}
needles:
  - text: "The special magic number is: {n}."
    question: "What is the special magic number?"
    answer: "{n}"
    vars: {n: {digits: 7}}
grid: {context_lengths: [400, 800], depths: [0, 50, 100]}
prompt: {user: "{haystack}\\n\\n{question}", reserve_tokens: 20}
models: [{id: local/gemma-3-270m}]
scoring:
  - contains: "{answer}"
"""


def vllm_line(request: dict, text: str | None, index: int) -> dict:
    """A line as vLLM's run-batch writes it: OpenAI's batch-output shape, errors inline in the response."""
    if text is None:
        body = {"object": "error", "message": "The prompt is too long.", "type": "BadRequestError", "code": 400}
        return {
            "id": f"vllm-{index}",
            "custom_id": request["custom_id"],
            "response": {"status_code": 400, "request_id": f"vllm-batch-{index}", "body": body},
            "error": None,
        }
    completion = {
        "id": f"cmpl-{index}",
        "object": "chat.completion",
        "created": 0,
        "model": request["body"]["model"],
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 300, "completion_tokens": 7, "total_tokens": 307},
    }
    return {
        "id": f"vllm-{index}",
        "custom_id": request["custom_id"],
        "response": {"status_code": 200, "request_id": f"vllm-batch-{index}", "body": completion},
        "error": None,
    }


def test_import_a_vllm_output_file(spec_file, tmp_path, cli):
    loaded = load_spec(spec_file(SPEC))
    run = compile_run(loaded.data, loaded.base_dir, tmp_path / "out", {}).path
    (shard,) = (run / "answers" / "requests").iterdir()
    requests = [json.loads(line) for line in shard.read_text().splitlines()]
    cells = {c["cell_id"]: c for c in map(json.loads, (run / "cells.jsonl").read_text().splitlines())}
    answers = [f"The number is {cells[r['custom_id']]['expected'][0]}." for r in requests]
    lines = [vllm_line(r, a if i != 2 else None, i) for i, (r, a) in enumerate(zip(requests, answers, strict=True))]
    stray = {**lines[0], "custom_id": "not-ours"}
    first = tmp_path / "vllm-out-1.jsonl"
    first.write_text("".join(json.dumps(x) + "\n" for x in [*lines[:4], stray]))
    result = cli("collect", str(run), "--from", str(first))
    assert result.code == 3  # two requests still without a result
    assert (
        "4 results imported, 0 already there, 1 lines not of this run; 2 requests still without a result" in result.out
    )
    second = tmp_path / "vllm-out-2.jsonl"
    second.write_text("".join(json.dumps(x) + "\n" for x in lines))  # everything again, in input order
    result = cli("collect", str(run), "--from", str(second))
    assert result.code == 4  # complete, with one request that failed on the GPU side
    assert "2 results imported, 4 already there" in result.out
    results = [json.loads(line) for line in (run / "answers" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["cell_id"] for r in results) == sorted(cells)  # exactly one result per cell
    error = next(r for r in results if r["status"] != "ok")
    assert error["cell_id"] == requests[2]["custom_id"] and error["error"]["message"] == "The prompt is too long."
    assert all(r["source"]["kind"] == "import" for r in results)
    scored = cli("score", str(run))
    assert scored.code == 0 and "5 pass" in scored.out and "1 error" in scored.out


MALFORMED = [
    b"not json\n",
    b"[1, 2]\n",
    b'"a string"\n',
    b'{"no_custom_id": 1}\n',
    b'{"custom_id": 7}\n',
    b'{"custom_id": "x", "error": "a string, not an object"}\n',
    b'{"custom_id": "x", "response": {"status_code": 200, "body": {"choices": []}}}\n',
    b'{"custom_id": "x", "response": {"status_code": 200, "body": {"choices": [{"message": 5}]}}}\n',
    b'{"custom_id": "x", "response": []}\n',
    b"\xff\xfe binary \x00\n",
]


def test_malformed_output_lines_are_refused_with_their_line_and_nothing_is_imported(spec_file, tmp_path, cli):
    loaded = load_spec(spec_file(SPEC))
    run = compile_run(loaded.data, loaded.base_dir, tmp_path / "out", {}).path
    (shard,) = (run / "answers" / "requests").iterdir()
    good = json.dumps(vllm_line(json.loads(shard.read_text().splitlines()[0]), "The number is 1.", 0)).encode() + b"\n"
    for bad in MALFORMED:
        output = tmp_path / "out.jsonl"
        output.write_bytes(good + bad)
        result = cli("collect", str(run), "--from", str(output))
        assert result.code == 2, (bad, result.err)
        assert f"{output}:2: not a" in result.err and "Traceback" not in result.err
        assert not (run / "answers" / "results.jsonl").exists()  # the good line before it is not imported either
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused = cli("collect", str(run), "--from", str(fifo))  # refused without blocking
    assert refused.code == 2 and "is a FIFO, not a regular file" in refused.err


# vLLM's BatchRequestInput (vllm/entrypoints/openai/run_batch.py): custom_id, method, url among the endpoints it
# serves, and a body its ChatCompletionRequest takes (model and messages required).
VLLM_REQUEST = {
    "type": "object",
    "required": ["custom_id", "method", "url", "body"],
    "additionalProperties": False,
    "properties": {
        "custom_id": {"type": "string"},
        "method": {"const": "POST"},
        "url": {"enum": ["/v1/chat/completions", "/v1/embeddings", "/v1/score", "/v1/rerank"]},
        "body": {
            "type": "object",
            "required": ["model", "messages"],
            "properties": {
                "model": {"type": "string"},
                "messages": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "object", "required": ["role", "content"]},
                },
                "max_tokens": {"type": "integer"},
                "max_completion_tokens": {"type": "integer"},
            },
            "not": {"anyOf": [{"required": ["prompt_cache_key"]}, {"required": ["service_tier"]}]},
        },
    },
}


def test_export_for_vllm_and_back_through_collect(spec_file, tmp_path, cli):
    import importlib.util
    import pathlib

    import jsonschema

    text = SPEC.replace("grid: {", "grid: {trials: 3, ").replace(
        "models: [{id: local/gemma-3-270m}]", "models: [{id: openai/gpt-4.1-mini}]"
    )
    assert cli("compile", spec_file(text), "-o", str(tmp_path / "o")).code == 0
    (run,) = (tmp_path / "o" / "gpu").iterdir()
    done = cli("export", str(run), "--for", "vllm", "--shards", "2", "--served-model-name", "llama")
    assert done.code == 0, done.err
    files = sorted((run / "export" / "vllm" / "answers").glob("*.jsonl"))
    assert len(files) == 2 and "vllm run-batch -i" in done.out
    cells = {json.loads(line)["cell_id"]: json.loads(line) for line in (run / "cells.jsonl").open()}
    exported = []
    for f in files:
        lines = [json.loads(line) for line in f.read_text().splitlines()]
        for line in lines:
            jsonschema.validate(line, VLLM_REQUEST)
            assert line["body"]["model"] == "llama"
        # a trial's cells (they share the haystack up to their needles) are in one file, in compile order
        trials = [cells[line["custom_id"]]["trial"] for line in lines]
        assert trials == sorted(trials)
        exported += lines
    assert sorted(line["custom_id"] for line in exported) == sorted(cells)
    by_file = [{cells[json.loads(x)["custom_id"]]["trial"] for x in f.read_text().splitlines()} for f in files]
    assert not by_file[0] & by_file[1]
    # The Ray Data LLM driver's output lines import as vLLM's do
    path = pathlib.Path(__file__).resolve().parent.parent / "examples" / "ray_data_llm.py"
    spec = importlib.util.spec_from_file_location("ray_data_llm", path)
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    out = tmp_path / "results.jsonl"
    out.write_text(
        "".join(json.dumps(driver.output_line(x["custom_id"], "1234567", 420, 3, "llama")) + "\n" for x in exported)
    )
    back = cli("collect", str(run), "--from", str(out))
    assert back.code == 0, back.err
    results = [json.loads(line) for line in (run / "answers" / "results.jsonl").open()]
    assert len(results) == len(cells) and all(r["status"] == "ok" and r["text"] == "1234567" for r in results)


def test_export_refuses_what_vllm_cannot_run(spec_file, tmp_path, cli):
    claude = SPEC.replace("models: [{id: local/gemma-3-270m}]", "models: [{id: anthropic/claude-haiku-4-5}]")
    assert cli("compile", spec_file(claude), "-o", str(tmp_path / "o")).code == 0
    (run,) = (tmp_path / "o" / "gpu").iterdir()
    refused = cli("export", str(run), "--for", "vllm")
    assert refused.code == 2 and "OpenAI-format" in refused.err
    assert cli("export", str(run), "--for", "sglang").code == 2
    assert cli("export", str(run), "--shards", "0").code == 2
