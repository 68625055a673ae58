"""Why prefix reuse needs the whole sliding-window cache: a prompt read on from llama.cpp's own checkpoint of its
prefix, on the cache the local engine kept before reuse (a window's sliding-window cache, checkpoints on), against
the same prompt read whole.

The server checkpoints a prompt's sliding-window cache before its batch [n - 512 + 4, ...): a first request of the
prefix [0, k] and 512 filler tokens leaves a checkpoint of [0, k] (k a multiple of 512), and the prompt sent next
(sharing [0, k], not the filler) is read on from it, the server evaluating position k again and the rest in a fresh
read's very micro-batches ([k, k + 512), ..., [n - 512, n - 4), [n - 4, n)). What differs from the fresh read is only
where the restored positions sit in the cache's ring of cells. Prints, per k, the tokens the server read from the
cache and the largest difference of the answer tokens' log-probabilities.

Run: .venv/bin/python bench/local_restore.py [--sentences 80] [--prefixes 512 1024]   (needs the `local` extra)
"""

from __future__ import annotations

import argparse
import os

from nspec.runners.providers import local

UBATCH = 512


def server() -> object:
    """llama.cpp's server set as the local engine was before prefix reuse."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(local.model_file(local.EMBEDDED_MODEL))
    params.n_ctx = 0
    params.n_parallel = 1
    params.kv_unified = True
    params.n_batch = UBATCH
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = len(os.sched_getaffinity(0))
    params.verbosity = -1
    return xllamacpp.Server(params)


def read(engine: object, prompt: list[int], cache: bool, answer: int = 3) -> tuple[list[float], int]:
    """The answer tokens' log-probabilities and the prompt tokens read from the cache."""
    got: list[dict] = []
    request = {"prompt": prompt, "temperature": 0, "n_predict": answer, "n_probs": 1, "cache_prompt": cache}
    engine.handle_completions(request, got.append)  # type: ignore[attr-defined]
    logprobs = [t["logprob"] for t in got[-1]["choices"][0]["logprobs"]["content"]] if answer else []
    return logprobs, int(got[-1]["usage"]["prompt_tokens_details"]["cached_tokens"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=80)
    parser.add_argument("--prefixes", type=int, nargs="+", default=[512, 1024])
    args = parser.parse_args()
    sentences = [f"Sentence {i} of the long and quiet story about Highbury." for i in range(args.sentences)]
    sentences.insert(args.sentences - 10, "The special magic number is: 7301944.")
    text = " ".join(sentences) + "\n\nWhat is the special magic number?\n\nThe special magic number is:"
    tokens = local.engine(local.EMBEDDED_MODEL)._tokenized(
        text, bos=True, with_pieces=False
    )  # as a completion reads it
    engine = server()
    whole, _ = read(engine, tokens, cache=False)
    for k in args.prefixes:
        filler = next(t for t in range(3) if t != tokens[k + 1])
        read(engine, [*tokens[: k + 1], *[filler] * UBATCH], cache=False, answer=0)
        resumed, cached = read(engine, tokens, cache=True)
        largest = max(abs(a - b) for a, b in zip(resumed, whole, strict=True))
        print(
            f"{len(tokens)}-token prompt read on from a checkpoint at {k}: {cached} tokens from the cache; "
            f"log-probabilities off by up to {largest:.2e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
