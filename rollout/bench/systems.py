"""The systems a benchmark compares, each a no-argument callable that runs a whole `Workload`.

Every system samples at temperature 1 and produces the sampled tokens' logprobs (what a GRPO trainer
needs), with its own copy of the model. Shared by `rollout bench` and benchmarks/bench_engine.py.
"""

from __future__ import annotations

import gc
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import GenerationConfig, PreTrainedModel
from transformers.generation import ContinuousBatchingConfig

from rollout import LLM, EngineConfig, SamplingParams
from rollout.bench.workloads import Workload
from rollout.engine.hybrid.recurrent_layers import recurrent_modules
from rollout.engine.model.model_loader import model_max_len

System = Callable[[], int]  # runs the whole workload once, returns the number of output tokens


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


def rollout_engine(model: PreTrainedModel, work: Workload, device: str) -> System:
    # A model that declares no context length (Mamba: no positions) gets the workload's.
    max_len = None if model_max_len(model) else max(len(p) for p in work.prompts) + work.new
    config = EngineConfig(
        max_num_seqs=max(256, len(work.prompts) * work.n), device=device, max_model_len=max_len
    )
    llm = LLM(model=model, config=config)
    params = SamplingParams(
        n=work.n, max_tokens=work.new, temperature=1.0, ignore_eos=work.eos_token_id is None, logprobs=0
    )

    def run() -> int:
        outs = llm.generate(work.prompts, params)
        return sum(len(c.token_ids) for o in outs for c in o.outputs)

    return run


def static_generate(model: PreTrainedModel, work: Workload) -> System:
    """`generate` given every row at once (prompts left-padded, `num_return_sequences=n`), logits kept
    for the logprobs: the strongest simple baseline. With EOS, a finished row pads until the last ends."""
    _sdpa(model)
    width = max(len(p) for p in work.prompts)
    pad = 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in work.prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in work.prompts], device=model.device)

    def run() -> int:
        out = model.generate(
            ids, attention_mask=mask, num_return_sequences=work.n, **_generate_kwargs(work), pad_token_id=pad
        )
        _sampled_logprobs(out, width)
        return _count_tokens(out.sequences[:, width:], work.eos_token_id)

    return run


def generate(model: PreTrainedModel, work: Workload) -> System:
    """Plain `generate`, one call per prompt with `num_return_sequences=n` (no padding waste)."""
    _sdpa(model)

    def run() -> int:
        total = 0
        for prompt in work.prompts:
            ids = torch.tensor([prompt], device=model.device)
            out = model.generate(ids, num_return_sequences=work.n, **_generate_kwargs(work), pad_token_id=0)
            _sampled_logprobs(out, len(prompt))
            total += _count_tokens(out.sequences[:, len(prompt) :], work.eos_token_id)
        return total

    return run


def generate_batch(model: PreTrainedModel, work: Workload, attn: str) -> System:
    """transformers' continuous batching with `num_return_sequences=n` and logprobs."""
    model.set_attn_implementation(attn)
    gen = GenerationConfig(
        max_new_tokens=work.new,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        num_return_sequences=work.n,
        eos_token_id=-1 if work.eos_token_id is None else work.eos_token_id,
        pad_token_id=0,
    )
    cb = ContinuousBatchingConfig(return_logprobs=True)

    def run() -> int:
        outs = model.generate_batch(
            work.prompts, generation_config=gen, continuous_batching_config=cb, progress_bar=False
        )
        return sum(len(o.generated_tokens) for o in outs.values())

    return run


def generate_batch_refusal(model: PreTrainedModel) -> str | None:
    """Why transformers' continuous batching cannot run `model`, or None: its cache holds attention KV
    only, so a model with recurrent layers (Mamba, Gated DeltaNet, short convolutions) fails in it."""
    recurrent = recurrent_modules(model)
    if not recurrent:
        return None
    return (
        f"transformers' continuous batching cannot run {type(model).__name__}: its cache holds attention "
        f"KV only, not the states of recurrent layers ({type(recurrent[0]).__name__})"
    )


def _sdpa(model: PreTrainedModel) -> None:
    """SDPA attention, for a model that has it (Mamba has no attention, and refuses the setting)."""
    if model._supports_sdpa:
        model.set_attn_implementation("sdpa")


def _generate_kwargs(work: Workload) -> dict:
    fixed = work.eos_token_id is None
    return dict(
        max_new_tokens=work.new,
        min_new_tokens=work.new if fixed else 0,
        eos_token_id=None if fixed else work.eos_token_id,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        output_logits=True,
        return_dict_in_generate=True,
    )


def _sampled_logprobs(out, prompt_width: int) -> torch.Tensor:
    """The logprob of each sampled token: what a trainer needs (computed, then dropped). Step by step:
    an fp32 [rows, steps, vocab] copy is 37 GiB at the GRPO shape (256 rows, 256 steps, 152k vocab)."""
    tokens = out.sequences[:, prompt_width:]  # [rows, steps]
    per_step = [
        torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens[:, i, None])[:, 0]
        for i, logits in enumerate(out.logits)  # logits: [rows, vocab]
    ]
    return torch.stack(per_step, dim=1)  # [rows, steps]


def _count_tokens(completions: torch.Tensor, eos: int | None) -> int:
    """Tokens up to and including each row's first EOS (padding after it is not output)."""
    if eos is None:
        return completions.numel()
    is_eos = completions == eos
    ended = is_eos.any(dim=1)
    first = is_eos.int().argmax(dim=1) + 1
    return int(torch.where(ended, first, completions.shape[1]).sum())


def measure(
    run: System, repeats: int, warmup: bool = True, progress: Callable[[str], None] | None = None
) -> Result:
    """Median of `repeats` timed runs, after one untimed warm-up run; `progress` hears of each run."""
    say = progress or (lambda _: None)
    if warmup:
        start = time.perf_counter()
        run()
        say(f"warm-up run {time.perf_counter() - start:.1f} s")
    times, tokens = [], 0
    for i in range(repeats):
        start = time.perf_counter()
        tokens = run()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        say(f"timed run {i + 1}/{repeats} {times[-1]:.1f} s")
    return Result(statistics.median(times), tokens)


def release_device_memory() -> None:
    """Frees what a dropped system held (an engine's KV cache, a model copy) for the next one."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads)"
