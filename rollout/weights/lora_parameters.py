"""LoRA on a raw parameter (PEFT `target_parameters`, its `ParamWrapper`): stacked MoE experts, routers.

"all-linear" on a MoE whose experts are 3-D parameters (Qwen3-MoE, Mixtral, Qwen3-Next: `experts.gate_up_proj`
[experts, out, in]) adapts each such parameter with one A [experts * r, in] and one B [out, experts * r]:
expert e's A is rows e*r..(e+1)*r, its B the columns e, e + experts, ... (PEFT's reshapes). The delta here
is PEFT's `ParamWrapper.get_delta_weight` op for op (one einsum), so the merge matches `merge_and_unload`.
"""

from __future__ import annotations

import torch

from rollout.weights.manifest import TensorSpec


def check_parameter_factors(
    name: str, a: TensorSpec, b: TensorSpec, weight: torch.Tensor | None, transposed: bool
) -> list[str]:
    """Problems of the factors of the parameter `name` (a 2-D weight, or [experts, out, in] experts,
    [experts, in, out] when `transposed`), each naming the parameter; [] when they fit."""
    if weight is None or weight.dim() not in (2, 3):
        return [f"{name}: no such 2-D or 3-D parameter in the model (a parameter target names the parameter)"]
    if weight.dim() == 2 and transposed:
        return [f"{name}: fan_in_fan_out applies to 3-D expert parameters only (PEFT refuses it here)"]
    experts = weight.shape[0] if weight.dim() == 3 else 1
    if weight.dim() == 3 and experts < 2:
        return [f"{name}: a stack of one expert is not supported by adapter updates; push merged weights"]
    out_features, in_features = _out_in(weight, transposed)
    layout = _layout(weight, transposed)
    rank = f"{experts}*r" if experts > 1 else "r"
    if not _stacked_factors(a.shape, b.shape, experts):
        return [
            f"{name}: lora_A {list(a.shape)} and lora_B {list(b.shape)} are not [{rank}, in] and "
            f"[out, {rank}] for the parameter {layout}"
        ]
    if a.shape[1] != in_features or b.shape[0] != out_features:
        return [
            f"{name}: lora_A {list(a.shape)} and lora_B {list(b.shape)} do not fit the parameter {layout} "
            f"(expected lora_A [{rank}, {in_features}], lora_B [{out_features}, {rank}])"
        ]
    return []


def experts_delta(
    a: torch.Tensor, b: torch.Tensor, scaling: float, weight_shape: torch.Size, transposed: bool
) -> torch.Tensor:
    """The delta of a 3-D experts parameter, in the factors' dtype, exactly as PEFT computes it."""
    experts = weight_shape[0]
    a = a.reshape(experts, -1, a.shape[-1])  # [experts, r, in]
    b = b.reshape(b.shape[0], -1, experts)  # [out, r, experts]
    return torch.einsum(f"o r e, e r i -> {'e i o' if transposed else 'e o i'}", b, a) * scaling


def _out_in(weight: torch.Tensor, transposed: bool) -> tuple[int, int]:
    if weight.dim() == 2:
        return weight.shape[0], weight.shape[1]
    return (weight.shape[2], weight.shape[1]) if transposed else (weight.shape[1], weight.shape[2])


def _layout(weight: torch.Tensor, transposed: bool) -> str:
    out_features, in_features = _out_in(weight, transposed)
    if weight.dim() == 2:
        return f"[out={out_features}, in={in_features}]"
    inner = f"in={in_features}, out={out_features}" if transposed else f"out={out_features}, in={in_features}"
    return f"[experts={weight.shape[0]}, {inner}]"


def _stacked_factors(a: tuple[int, ...], b: tuple[int, ...], experts: int) -> bool:
    """A [experts * r, in] and B [out, experts * r], r >= 1."""
    if len(a) != 2 or len(b) != 2 or a[0] != b[1]:
        return False
    return a[0] >= experts and a[0] % experts == 0
