"""The in-process engine of TRL's colocate mode, serving the trainer's own weights when it can.

When the engine would hold the trainer's parameters at the same dtype on the same device (a full model,
not sharded by ZeRO-3/FSDP, not PEFT), it is built over a structural copy of the trainer's model whose
parameters ARE the trainer's tensors (same storage, no second copy, no transport): the optimizer's
in-place step is the weight update, and `commit_weight_version()` after it starts a new version (the prefix
cache keyed by it). Otherwise the engine gets its own weights and every sync copies into them, atomically.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import torch
from accelerate.utils import is_peft_model
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

from rollout import LLM, EngineConfig
from rollout.engine.model.model_loader import resolve_dtype
from rollout.engine.vision.vision_model import is_image_text_model

logger = logging.getLogger(__name__)


def shares_weights(model: Any, config: EngineConfig, sharded: bool) -> str | None:
    """None when the engine can serve `model`'s own storage, else why not (logged)."""
    if is_peft_model(model):
        return "a PEFT model: the engine serves base + adapter merged"
    if sharded:
        return "parameters sharded by DeepSpeed ZeRO-3 / FSDP"
    devices = {p.device for p in model.parameters()}
    dtypes = {p.dtype for p in model.parameters()}
    if len(devices) != 1 or len(dtypes) != 1:
        return f"parameters on {len(devices)} devices in {len(dtypes)} dtypes"
    device, dtype = devices.pop(), dtypes.pop()
    if config.device != "auto" and not _same_device(torch.device(config.device), device):
        return f"the engine's device {config.device} differs from the trainer's {device}"
    if config.dtype != "auto" and resolve_dtype(config, device, dtype) != dtype:
        return f"the engine's dtype {config.dtype} differs from the trainer's {dtype}"
    return None


def aliasing_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of `model`'s structure whose parameters and buffers are views of `model`'s own storage.

    Tied weights stay tied (one alias per parameter object); nothing of the trainer's model changes (the
    engine switches the copy's attention implementation and modules, and its config is the copy's own)."""
    memo: dict[int, Any] = {}
    for param in model.parameters():
        memo[id(param)] = torch.nn.Parameter(param.detach(), requires_grad=False)
    for buffer in model.buffers():
        memo[id(buffer)] = buffer.detach()
    clone = _plain(copy.deepcopy(model, memo))
    for name, param in clone.named_parameters():
        original = model.get_parameter(name)
        assert param.untyped_storage().data_ptr() == original.untyped_storage().data_ptr(), name
    return clone


class SharedWeights:
    """The engine's parameters as views of the trainer's, followed when a wrapper re-points the trainer's.

    DistributedDataParallel's set-up (and any `param.data = ...`) gives a trainer parameter new storage
    after the engine was built; `follow` points the engine's parameter at it again (no copy), so the engine
    never serves a storage the optimizer no longer writes."""

    def __init__(self, engine_model: torch.nn.Module) -> None:
        self.params = list(engine_model.named_parameters())

    def follow(self, trainer_model: torch.nn.Module) -> int:
        """Re-points every engine parameter whose trainer parameter moved; returns how many did."""
        moved = 0
        for name, param in self.params:
            source = trainer_model.get_parameter(name).detach()
            if param.data_ptr() == source.data_ptr():
                continue
            if (source.shape, source.dtype, source.device) != (param.shape, param.dtype, param.device):
                raise RuntimeError(
                    f"the trainer's {name} became {tuple(source.shape)} {source.dtype} on {source.device}; the "
                    f"colocated engine served it as {tuple(param.shape)} {param.dtype} on {param.device}"
                )
            param.data = source
            moved += 1
        return moved


def build_engine_llm(model: Any, processor: Any, config: EngineConfig, shared: bool, sharded: bool) -> LLM:
    """The process's LLM: over an aliasing copy of `model` (`shared`), or over its own copy of it (of its
    structure only when `sharded`: the first sync, before any generation, writes every gathered weight).
    `processor` is the trainer's processing class: a tokenizer, or a VLM's processor (its image processor
    builds the engine's image prompts, as a server's)."""
    if shared:
        llm = LLM(model=aliasing_copy(model), tokenizer=processor, config=config)
        llm.memory.weights_shared = True  # sleep never frees the trainer's parameters
        return llm
    if sharded:  # ZeRO-3 / FSDP: this process holds a shard, the module tree is whole
        base = model.get_base_model() if is_peft_model(model) else model
        auto = AutoModelForImageTextToText if is_image_text_model(base) else AutoModelForCausalLM
        own = auto.from_config(copy.deepcopy(base.config), dtype=getattr(base.config, "dtype", None))
        llm = LLM(model=own.eval().requires_grad_(False), tokenizer=processor, config=config)
        llm.sleep(level=2)  # the random init never serves: generation is refused until a sync writes
        llm.wake_up(tags=["weights"])  # every parameter (rollout/engine/sleep/engine_memory.py)
        return llm
    own = copy.deepcopy(model)
    if is_peft_model(own):
        own = own.unload()  # the base weights, without the adapter (merged in by each sync)
    return LLM(model=_plain(own).eval().requires_grad_(False), tokenizer=processor, config=config)


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def _plain(model: torch.nn.Module) -> torch.nn.Module:
    """`model` without the forward wrappers a trainer set on its instances (accelerate's autocast and
    fp32-output wrappers are bound to the trainer's module: a copy would call the original)."""
    for module in model.modules():
        for attribute in ("forward", "_original_forward", "_hf_hook"):
            module.__dict__.pop(attribute, None)
    return model
