"""Offline generation in your own process: N samples per prompt with logprobs, no server.

python examples/offline_generate.py                 # the embedded default model
python examples/offline_generate.py --model DIR     # any Hugging Face causal LM directory
"""

from __future__ import annotations

import argparse

from rollout import LLM, SamplingParams
from rollout.tasks import addition


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="model directory (default: the embedded addition model)")
    args = parser.parse_args()
    llm = LLM(args.model)
    prompts = addition.make_prompts(4, seed=0) if args.model is None else ["Hello, my name is"]
    outputs = llm.generate(prompts, SamplingParams(n=4, max_tokens=8, temperature=1.0, seed=0, logprobs=0))
    for prompt, output in zip(prompts, outputs, strict=True):
        print(f"{prompt!r}")
        for sample in output.outputs:
            logprob = sum(sample.token_logprobs or [])
            print(
                f"  [{sample.index}] {sample.text!r:12} logprob {logprob:7.3f}  finish {sample.finish_reason}"
            )
    print("stats:", llm.stats())


if __name__ == "__main__":
    main()
