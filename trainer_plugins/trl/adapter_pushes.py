"""What a push of a PEFT policy sends: its LoRA adapter, or its base weights with it when the servers
may not hold that base (the first push, after a server restart, after another writer).

The servers merge each adapter into the base they keep (docs/weight_updates.md), so after a full
push every step moves only the adapter: tens of MB instead of the model. Each adapter push names
that base (the client pins it per server), and a server holding another refuses it; the plugin then
recovers and pushes the base again (server_restarts.py). Sharded trainers (ZeRO-3, FSDP) and
`RolloutConfig(adapter_pushes=False)` push TRL's merged weights as before.
"""

from __future__ import annotations

from typing import Any

import torch

from rollout.weights.lora import LoraTargets, adapter_factor
from rollout.weights.lora_export import is_peft_model, peft_update

from . import push_dtype


def uses_adapter_pushes(model: Any, enabled: bool, sharded: bool) -> bool:
    return enabled and not sharded and is_peft_model(model)


def adapter_push(
    model: Any, full: bool, server_dtype: torch.dtype | None
) -> tuple[list[tuple[str, torch.Tensor]], LoraTargets]:
    """(named tensors, LoRA targets); base tensors in the server's dtype, LoRA factors as trained
    (the server merges them as PEFT does, in their own dtype)."""
    named, targets = peft_update(model, "full" if full else "adapter")
    factors = [(n, t.clone()) for n, t in named if adapter_factor(n) is not None]
    base = [(n, t.clone()) for n, t in named if adapter_factor(n) is None]
    return push_dtype.cast(base, server_dtype) + factors, targets
