"""LoRA adapter updates: which tensors of an update are adapter factors, their check, PEFT's merge formula.

An adapter update carries, per adapted module, `<module>.lora_A.weight` [r, in] and
`<module>.lora_B.weight` [out, r] plus a `LoraTarget` (PEFT's scaling, the weight layout); a raw
parameter target (stacked MoE experts) is keyed by the parameter's own name (lora_parameters.py). The
server serves `base + scaling * B @ A`, computed exactly as PEFT's `merge_and_unload` does, so an adapter
push and a push of the PEFT-merged weights serve the same tensors (docs/weight_updates.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from rollout.weights.lora_parameters import check_parameter_factors, experts_delta
from rollout.weights.manifest import (
    Manifest,
    TensorSpec,
    WeightUpdateError,
    strip_wrappers,
    validate_manifest,
)

_FACTORS = {"lora_A": "A", "lora_B": "B"}
_UNSUPPORTED = ("lora_embedding_A", "lora_embedding_B", "lora_magnitude_vector")
_FLOAT_DTYPES = ("float32", "bfloat16", "float16", "float64")


@dataclass(frozen=True, slots=True)
class LoraTarget:
    """How one module's adapter is merged: `scaling` (PEFT's lora_alpha / r, or / sqrt(r) with rsLoRA)
    and `fan_in_fan_out` (the base weight is stored [in, out], as GPT-2's Conv1D does; for experts,
    [experts, in, out]). `parameter`: the target is a raw parameter (PEFT's ParamWrapper), keyed by
    the parameter's name (`...mlp.experts.gate_up_proj`) instead of its module's."""

    scaling: float
    fan_in_fan_out: bool = False
    parameter: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.scaling, bool) or not math.isfinite(self.scaling):
            raise WeightUpdateError(f"LoRA scaling must be a finite number, got {self.scaling!r}")


LoraTargets = Mapping[str, LoraTarget]  # module (or parameter) name, the HF model's, wrappers stripped


def target_weight(module: str, target: LoraTarget) -> str:
    """The name of the weight an adapter merges into: the module's `.weight`, or the parameter itself."""
    return module if target.parameter else f"{module}.weight"


def adapter_factor(name: str) -> tuple[str, str] | None:
    """(module, "A" | "B") when `name` is a LoRA factor, else None; refuses LoRA kinds not supported.

    Accepts PEFT's names with or without the adapter name: `...q_proj.lora_A.default.weight`,
    `...q_proj.lora_A.weight`, wrapped (`base_model.model.`) or not.
    """
    parts = strip_wrappers(name).split(".")
    unsupported = [p for p in parts if p in _UNSUPPORTED]
    if unsupported:
        raise WeightUpdateError(
            f"{name}: {unsupported[0]} (embedding LoRA, DoRA) is not supported by adapter updates; "
            "push the merged weights for this model instead (lora='merged')"
        )
    marks = [i for i, p in enumerate(parts) if p in _FACTORS]
    if not marks:
        return None
    i = marks[0]
    tail = parts[i + 1 :]
    if tail not in (["weight"], [tail[0], "weight"]) or i == 0:
        raise WeightUpdateError(f"{name}: not a LoRA factor name (<module>.lora_A[.<adapter>].weight)")
    return ".".join(parts[:i]), _FACTORS[parts[i]]


def validate_update(
    manifest: Manifest, targets: Mapping[str, torch.Tensor], lora: LoraTargets | None
) -> dict[str, tuple[str, str]]:
    """Checks an update that may carry adapter factors; returns {sent name: (module, factor)} of the
    factors, or raises naming every bad module. The other tensors are checked as any update's."""
    factors: dict[str, tuple[str, str]] = {}
    base: list[TensorSpec] = []
    for spec in manifest.tensors:
        key = adapter_factor(spec.name)
        if key is None:
            base.append(spec)
        else:
            factors[spec.name] = key
    problems = _check_factors(manifest, factors, targets, lora or {}) if factors or lora else []
    try:
        validate_manifest(Manifest(tuple(base)), targets)
    except WeightUpdateError as err:
        problems.append(str(err).removeprefix("weight update refused, nothing written: "))
    if problems:
        raise WeightUpdateError("weight update refused, nothing written: " + "; ".join(problems))
    return factors


def _check_factors(
    manifest: Manifest,
    factors: Mapping[str, tuple[str, str]],
    targets: Mapping[str, torch.Tensor],
    lora: LoraTargets,
) -> list[str]:
    specs = {spec.name: spec for spec in manifest.tensors}
    by_module: dict[str, dict[str, TensorSpec]] = {}
    problems = []
    for sent, (module, factor) in factors.items():
        if factor in by_module.setdefault(module, {}):
            problems.append(f"{module}: lora_{factor} sent twice (one adapter per module)")
        by_module[module][factor] = specs[sent]
    if not lora and by_module:
        return [
            f"{', '.join(sorted(by_module))}: LoRA factors without their scaling; push a PEFT model "
            "(client.update_weights(peft_model)) or pass lora_targets, or merge the adapter first "
            "(peft: `model.merge_and_unload()`)"
        ]
    for module in sorted(set(lora) - set(by_module)):
        problems.append(f"{module}: a LoRA target without lora_A and lora_B tensors")
    for module, pair in sorted(by_module.items()):
        problems += _check_module(module, pair, targets, lora.get(module))
    return problems


def _check_module(
    module: str,
    pair: Mapping[str, TensorSpec],
    targets: Mapping[str, torch.Tensor],
    target: LoraTarget | None,
) -> list[str]:
    if target is None:
        return [f"{module}: LoRA factors sent without a LoRA target (scaling) for the module"]
    if set(pair) != {"A", "B"}:
        return [f"{module}: lora_A and lora_B must both be sent (got only lora_{next(iter(pair))})"]
    a, b = pair["A"], pair["B"]
    weight = targets.get(target_weight(module, target))
    if target.parameter:
        problems = check_parameter_factors(module, a, b, weight, target.fan_in_fan_out)
    else:
        problems = _check_linear(module, a, b, weight, target)
    if a.dtype != b.dtype or a.dtype not in _FLOAT_DTYPES:
        problems.append(f"{module}: lora_A ({a.dtype}) and lora_B ({b.dtype}) must share one floating dtype")
    return problems


def _check_linear(
    module: str, a: TensorSpec, b: TensorSpec, weight: torch.Tensor | None, target: LoraTarget
) -> list[str]:
    if weight is None or weight.dim() != 2:
        return [f"{module}: no such linear module in the model (LoRA targets a 2-D `{module}.weight`)"]
    out_features, in_features = weight.shape[::-1] if target.fan_in_fan_out else weight.shape
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[0] != b.shape[1] or a.shape[0] < 1:
        return [f"{module}: lora_A {list(a.shape)} and lora_B {list(b.shape)} are not [r, in] and [out, r]"]
    if a.shape[1] != in_features or b.shape[0] != out_features:
        return [
            f"{module}: lora_A {list(a.shape)} and lora_B {list(b.shape)} do not fit the weight "
            f"[out={out_features}, in={in_features}] (expected lora_A [r, {in_features}], lora_B [{out_features}, r])"
        ]
    return []


def adapter_delta(
    a: torch.Tensor, b: torch.Tensor, target: LoraTarget, weight: torch.Tensor, device: torch.device
) -> torch.Tensor:
    """The full delta PEFT merges into `weight` (the model's parameter, full shape): a module's
    (`delta_weight`), or a parameter's, which PEFT's ParamWrapper casts to the weight's dtype first."""
    if not target.parameter:
        return delta_weight(a, b, target, device)
    if weight.dim() == 2:
        return delta_weight(a, b, target, device).to(weight.dtype)
    delta = experts_delta(a.to(device), b.to(device), target.scaling, weight.shape, target.fan_in_fan_out)
    return delta.to(weight.dtype)


def delta_weight(a: torch.Tensor, b: torch.Tensor, target: LoraTarget, device: torch.device) -> torch.Tensor:
    """PEFT's `get_delta_weight`, op for op: B @ A (transposed for fan_in_fan_out) times the scaling,
    in fp32 when half-precision factors sit on a CPU, returned in the factors' dtype."""
    a, b = a.to(device), b.to(device)
    dtype = b.dtype
    upcast = device.type == "cpu" and dtype in (torch.float16, torch.bfloat16)
    if upcast:
        a, b = a.float(), b.float()
    product = b @ a
    delta = (product.T if target.fan_in_fan_out else product) * target.scaling
    return delta.to(dtype) if upcast else delta


def merged_weight(base: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """`base + delta` as PEFT's merge writes it (`weight.data += delta`): added in the promoted
    dtype, stored in the base's dtype."""
    return torch.add(base, delta).to(base.dtype)
