"""Builders for LoRA adapter-update tests: a PEFT policy over a tiny model, its adapter at any seed,
and the reference an adapter push must equal (a push of the PEFT-merged weights)."""

from __future__ import annotations

import copy

import torch
from peft import LoraConfig, get_peft_model
from peft.peft_model import PeftModel

from rollout import SamplingParams
from tests.builders import random_prompts, tiny_llm, tiny_model

GREEDY_LOGPROBS = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, logprobs=0)
PROMPTS = random_prompts(3, 5, 30, seed=1)


def peft_policy(
    base_seed: int = 0, adapter_seed: int = 1, r: int = 4, arch: str = "llama", **lora: object
) -> PeftModel:
    """A PEFT LoRA model over `tiny_model(arch, base_seed)` whose adapter is non-zero (seeded)."""
    config = LoraConfig(r=r, lora_alpha=2 * r, target_modules="all-linear", **lora)
    model = get_peft_model(tiny_model(arch, seed=base_seed), config)
    return set_adapter(model, adapter_seed)


def set_adapter(model: PeftModel, seed: int) -> PeftModel:
    """Fills every LoRA factor from `seed`: a training step's new adapter, the base untouched."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.2)
    return model


def merged_state(model: PeftModel) -> dict[str, torch.Tensor]:
    """What TRL pushed before adapter updates: the PEFT-merged model's state dict."""
    return copy.deepcopy(model).merge_and_unload().state_dict()


def outputs(llm_or_client) -> tuple[list[list[int]], list[list[float]]]:
    outs = llm_or_client.generate(PROMPTS, GREEDY_LOGPROBS)
    return [o.outputs[0].token_ids for o in outs], [o.outputs[0].token_logprobs for o in outs]


def merged_reference(
    model: PeftModel, server_seed: int = 0, arch: str = "llama", **config: object
) -> tuple[list[list[int]], list[list[float]]]:
    """Outputs of a server (model seed `server_seed`, EngineConfig `config`) after a full push of
    `model`'s merged weights."""
    llm = tiny_llm(arch, seed=server_seed, **config)
    llm.update_weights(merged_state(model))
    return outputs(llm)


def assert_same_outputs(got, want, tolerance: float = 1e-4) -> None:
    (tokens, logprobs), (ref_tokens, ref_logprobs) = got, want
    assert tokens == ref_tokens
    worst = max(
        abs(a - b)
        for row, ref in zip(logprobs, ref_logprobs, strict=True)
        for a, b in zip(row, ref, strict=True)
    )
    assert worst <= tolerance, worst
