"""The systems a benchmark compares, each as a no-argument callable that runs the whole workload.

Workload: prompts x n samples, a fixed number of new tokens (ignore_eos, so every system does the
same work), temperature 1 with the sampled tokens' logprobs (what a GRPO trainer needs). Each
system gets its own copy of the model. Shared by `rollout bench` and benchmarks/bench_engine.py.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import GenerationConfig, PreTrainedModel
from transformers.generation import ContinuousBatchingConfig

from rollout import LLM, EngineConfig, SamplingParams

Workload = Callable[[], int]  # runs everything once, returns the number of output tokens


@dataclass(frozen=True)
class Result:
    seconds: float  # median wall time of one full run
    tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def random_prompts(
    count: int, lo: int, hi: int, vocab: int, first_id: int = 3, seed: int = 0
) -> list[list[int]]:
    """`count` prompts of uniform length in [lo, hi] of ids in [first_id, vocab) (specials avoided)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi + 1, (count,), generator=g).tolist()
    return [torch.randint(first_id, vocab, (n,), generator=g).tolist() for n in lengths]


def rollout_engine(
    model: PreTrainedModel, prompts: list[list[int]], n: int, new: int, device: str
) -> Workload:
    llm = LLM(model=model, config=EngineConfig(max_num_seqs=max(256, len(prompts) * n), device=device))
    params = SamplingParams(n=n, max_tokens=new, temperature=1.0, ignore_eos=True, logprobs=0)

    def run() -> int:
        outs = llm.generate(prompts, params)
        return sum(len(c.token_ids) for o in outs for c in o.outputs)

    return run


def generate_batch(model: PreTrainedModel, prompts: list[list[int]], n: int, new: int, attn: str) -> Workload:
    """transformers' continuous batching with `num_return_sequences=n` and logprobs."""
    model.set_attn_implementation(attn)
    gen = GenerationConfig(
        max_new_tokens=new,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        num_return_sequences=n,
        eos_token_id=-1,
        pad_token_id=0,
    )
    cb = ContinuousBatchingConfig(return_logprobs=True)

    def run() -> int:
        outs = model.generate_batch(
            prompts, generation_config=gen, continuous_batching_config=cb, progress_bar=False
        )
        return sum(len(o.generated_tokens) for o in outs.values())

    return run


def generate(model: PreTrainedModel, prompts: list[list[int]], n: int, new: int) -> Workload:
    """Plain `generate`, one call per prompt with `num_return_sequences=n` (no padding waste)."""
    model.set_attn_implementation("sdpa")

    def run() -> int:
        total = 0
        for prompt in prompts:
            ids = torch.tensor([prompt], device=model.device)
            out = model.generate(
                ids,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=True,
                top_k=0,
                num_return_sequences=n,
                pad_token_id=0,
                output_logits=True,
                return_dict_in_generate=True,
            )
            torch.log_softmax(torch.stack(out.logits).float(), -1)  # the logprobs a trainer needs
            total += (out.sequences.shape[1] - len(prompt)) * n
        return total

    return run


def measure(run: Workload, repeats: int, warmup: bool = True) -> Result:
    """Median of `repeats` timed runs, after one untimed warm-up run."""
    if warmup:
        run()
    times, tokens = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = run()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return Result(statistics.median(times), tokens)


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads)"
