"""The scale-out path: `vllm run-batch` reads the compiled OpenAI shards and writes one output file, in input order,
errors inline; `nspec collect RUN --from FILE` makes it the run's results."""

import json
import os

from nspec.compiler.run_directory import compile_run
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
