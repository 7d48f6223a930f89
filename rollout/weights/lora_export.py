"""What a push of a PEFT LoRA model sends: its adapter factors and scalings, or base weights too.

`"adapter"` sends each LoRA layer's A and B (their scaling rides in the commit options; LoRA on a raw
parameter, such as stacked MoE experts, goes by the parameter's name) and every
other trainable tensor (`modules_to_save` copies, trained biases) by its model name; `"full"` adds
the frozen base weights, unmerged, so the server keeps them as the base its adapters merge into
(the push after start-up or a server restart). Only torch and duck typing: PEFT itself is not imported.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from rollout.weights.lora import LoraTarget, LoraTargets
from rollout.weights.manifest import WeightUpdateError, normalize_name, strip_wrappers

LORA_MODES = ("adapter", "full")
_SAVED = ".modules_to_save."
_ORIGINAL = ".original_module."


def is_peft_model(model: object) -> bool:
    """A PEFT model (PeftModel and its task subclasses: they carry `peft_config` and `base_model`)."""
    return isinstance(model, nn.Module) and hasattr(model, "peft_config") and hasattr(model, "base_model")


def peft_update(
    model: nn.Module, mode: str = "adapter"
) -> tuple[list[tuple[str, object]], dict[str, LoraTarget]]:
    """(named tensors with HF names, {module: LoraTarget}) for a push of `model`'s active adapter."""
    if mode not in LORA_MODES:
        raise ValueError(f"lora must be one of {LORA_MODES}, got {mode!r}")
    adapter = _active_adapter(model)
    targets, factors = {}, []
    for name, module in model.named_modules():
        if not hasattr(module, "lora_A") or adapter not in module.lora_A:
            continue
        hf_name = normalize_name(name + ".weight").removesuffix(".weight")
        _refuse_unsupported(hf_name, module, adapter)
        key, targets[key] = _target(hf_name, module, adapter)
        factors.append((f"{key}.lora_A.weight", module.lora_A[adapter].weight.detach()))
        factors.append((f"{key}.lora_B.weight", module.lora_B[adapter].weight.detach()))
    if not targets:
        raise WeightUpdateError(f"the PEFT model has no LoRA layers for its active adapter {adapter!r}")
    return _other_tensors(model, adapter, mode) + factors, targets


def update_source(source: Any, lora: LoraTargets | str | None) -> tuple[Any, LoraTargets | None]:
    """(named tensors, LoRA targets) of what a caller passed to `update_weights`: a PEFT model and a
    mode name ("adapter" by default, "full"), or tensors and their LoRA targets (or None)."""
    if is_peft_model(source):
        return peft_update(source, "adapter" if lora is None else lora)
    if isinstance(lora, str):
        raise ValueError(
            f"lora={lora!r} is for PEFT models; with tensors pass {{module: LoraTarget}} or None"
        )
    if isinstance(source, nn.Module):
        source = source.state_dict()
    return source, lora


def _active_adapter(model: nn.Module) -> str:
    active = getattr(model, "active_adapters", None) or [getattr(model, "active_adapter", "default")]
    if len(active) != 1:
        raise WeightUpdateError(f"adapter updates carry one active adapter, the model has {list(active)}")
    config = model.peft_config[active[0]]
    if getattr(config, "peft_type", None) is not None and str(config.peft_type.value) != "LORA":
        raise WeightUpdateError(
            f"adapter updates carry LoRA adapters, the model's is {config.peft_type.value}"
        )
    return active[0]


def _refuse_unsupported(name: str, module: nn.Module, adapter: str) -> None:
    if getattr(module, "use_dora", {}).get(adapter, False):
        raise WeightUpdateError(
            f"{name}: DoRA adapters are not supported by adapter updates; push merged weights"
        )
    if getattr(module, "lora_bias", {}).get(adapter, False):
        raise WeightUpdateError(
            f"{name}: lora_bias adapters are not supported by adapter updates; push merged weights"
        )
    if not isinstance(module.lora_A[adapter], nn.Linear):
        raise WeightUpdateError(f"{name}: only linear LoRA layers are supported by adapter updates")


def _target(name: str, module: nn.Module, adapter: str) -> tuple[str, LoraTarget]:
    """(the key its factors go by, its LoraTarget): the module's name, or for PEFT's ParamWrapper
    (LoRA on a raw parameter: stacked MoE experts, "all-linear" adds them) the parameter's name."""
    scaling = float(module.scaling[adapter])
    if not hasattr(module, "parameter_name"):
        return name, LoraTarget(scaling, bool(getattr(module, "fan_in_fan_out", False)))
    parameter = f"{name}.{module.parameter_name}"
    if module.get_param().dim() != 3:
        return parameter, LoraTarget(scaling, parameter=True)
    swapped = getattr(module, "_did_swap_in_out_features", None)  # what PEFT's delta reads: [e, out, in]
    if not isinstance(swapped, bool):
        raise WeightUpdateError(
            f"{parameter}: this PEFT version's ParamWrapper does not say its experts' layout; push merged weights"
        )
    return parameter, LoraTarget(scaling, fan_in_fan_out=not swapped, parameter=True)


def _other_tensors(model: nn.Module, adapter: str, mode: str) -> list[tuple[str, object]]:
    """Non-LoRA parameters by their HF names: trainable ones (mode "adapter") or all of them ("full").
    Buffers stay home (the server derives its rotary tables; a cast would spoil them)."""
    out, seen = [], set()
    for name, param in model.named_parameters():
        parts = name.split(".")
        if "lora_A" in parts or "lora_B" in parts or _ORIGINAL in f".{name}":
            continue
        if _SAVED in name:
            if f"{_SAVED}{adapter}." not in name:
                continue
            hf = strip_wrappers(name.replace(f"{_SAVED}{adapter}.", "."))
        else:
            hf = normalize_name(name)
        if (mode == "full" or param.requires_grad) and hf not in seen:
            seen.add(hf)
            out.append((hf, param.detach()))
    return out
