"""Run exported requests on a GPU cluster with Ray Data LLM (vLLM underneath) and write lines that
`nspec collect RUN --from` imports.

    nspec export RUN --for vllm --shards 8
    python examples/ray_data_llm.py --model MODEL_PATH --out results.jsonl RUN/export/vllm/answers/*.jsonl
    nspec collect RUN --from results.jsonl

Needs `pip install "ray[data,llm]"` on the cluster (not a dependency of nspec). Each exported file holds requests
that share prompt prefixes, in order, so vLLM's prefix cache (on here) serves them together.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any


def output_line(custom_id: str, text: str, input_tokens: int, output_tokens: int, model: str) -> dict[str, Any]:
    """One OpenAI batch-output line: what `vllm run-batch` writes for a chat completion."""
    return {
        "id": f"vllm-{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": {
            "status_code": 200,
            "request_id": f"vllm-batch-{uuid.uuid4().hex}",
            "body": {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {
                    "prompt_tokens": input_tokens,
                    "completion_tokens": output_tokens,
                    "total_tokens": input_tokens + output_tokens,
                },
            },
        },
        "error": None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="files written by `nspec export --for vllm`")
    parser.add_argument("--model", required=True, help="the model's Hugging Face id or local path")
    parser.add_argument("--out", required=True, help="the output file for `nspec collect --from`")
    parser.add_argument("--replicas", type=int, default=1, help="vLLM engines (one per GPU, or per tensor group)")
    parser.add_argument("--max-model-len", type=int, default=131072)
    args = parser.parse_args()

    import ray
    from ray.data.llm import build_llm_processor, vLLMEngineProcessorConfig

    config = vLLMEngineProcessorConfig(
        model_source=args.model,
        engine_kwargs={"enable_prefix_caching": True, "max_model_len": args.max_model_len},
        concurrency=args.replicas,
        batch_size=16,
    )

    def preprocess(row: dict[str, Any]) -> dict[str, Any]:
        body = row["body"]
        limit = body.get("max_completion_tokens") or body.get("max_tokens") or 256
        sampling = {"temperature": body.get("temperature", 0.0), "max_tokens": limit}
        return {"custom_id": row["custom_id"], "messages": body["messages"], "sampling_params": sampling}

    def postprocess(row: dict[str, Any]) -> dict[str, Any]:
        line = output_line(
            row["custom_id"],
            row["generated_text"],
            int(row.get("num_input_tokens") or 0),
            int(row.get("num_generated_tokens") or 0),
            args.model,
        )
        return {"line": json.dumps(line, ensure_ascii=False)}

    processor = build_llm_processor(config, preprocess=preprocess, postprocess=postprocess)
    dataset = processor(ray.data.read_json(args.files))
    with open(args.out, "w", encoding="utf-8") as out:  # streamed back row by row
        for row in dataset.iter_rows():
            out.write(row["line"] + "\n")


if __name__ == "__main__":
    main()
