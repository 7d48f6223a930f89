"""The CPU fast path for hot module kinds: RMSNorm, gated MLPs and Llama-family attention run fused
kernels inside the engine, and rotary embeddings read their cos and sin from a table (fused_rotary.py).

transformers' Llama-family RMSNorm is eight eager ops, its gated MLP's activation two and its rotary
embedding ten (fused_attention.py), each a pass over the activations plus a dispatch; on a CPU decode
step of a small model they cost a fifth as much as the matmuls (csrc/fused_cpu.cpp does each in one
pass). A module gets the fused forward only when the kernel reproduces the module's own forward on a
probe, and the fused forward serves only while the engine runs the model (inside its forward
context, fp32 CPU inputs, no autograd); anywhere else, the self-check's reference included, the
module runs the forward transformers defines. The matmuls stay the module's own `nn.Linear` calls,
so the parameter names, weight updates and the benchmarks' matmul floor see the model unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import MethodType

import torch

from rollout.hf import fused_attention, fused_rotary
from rollout.hf.fused_checks import engaged, reproduced
from rollout.ops.cpu_kernels import load_cpu_kernels

logger = logging.getLogger(__name__)

_PROBE_ROWS = 3


def install(model: torch.nn.Module) -> dict[str, int]:
    """Swaps in the fused forward of every module the kernels reproduce; returns the count per kind."""
    counts = {kind: 0 for kind in _KINDS}
    if load_cpu_kernels() is None or next(model.parameters()).device.type != "cpu":
        return counts
    for module in model.modules():
        for kind, (matches, reproduces, forward) in _KINDS.items():
            # a probe per module, not per class: a forward may read per-instance attributes
            if "forward" not in module.__dict__ and matches(module) and reproduces(module):
                module.forward = MethodType(forward, module)
                counts[kind] += 1
    logger.debug("fused CPU modules: %s", ", ".join(f"{n} {kind}" for kind, n in counts.items()))
    return counts


def fused_module_count(model: torch.nn.Module) -> int:
    """How many of `model`'s modules run a fused forward inside the engine."""
    fused = {forward for _, _, forward in _KINDS.values()}
    return sum(
        1
        for m in model.modules()
        if isinstance(m.__dict__.get("forward"), MethodType) and m.__dict__["forward"].__func__ in fused
    )


def _is_rms_norm(module: torch.nn.Module) -> bool:
    weight = module._parameters.get("weight")
    return (
        type(module).__name__.endswith("RMSNorm")
        and weight is not None
        and weight.dim() == 1
        and len(module._parameters) == 1
        and not module._modules
        and _epsilon(module) is not None
    )


def _epsilon(module: torch.nn.Module) -> float | None:
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    return eps if isinstance(eps, float) else None


def _rms_norm(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return load_cpu_kernels().rms_norm(x.contiguous(), module.weight.detach(), _epsilon(module))


def fused_rms_norm_forward(
    self: torch.nn.Module, hidden_states: torch.Tensor, *args, **kwargs
) -> torch.Tensor:
    if args or kwargs or not engaged(hidden_states, self.weight):  # e.g. a gated norm given its gate
        return type(self).forward(self, hidden_states, *args, **kwargs)
    return _rms_norm(self, hidden_states)


def _is_gated_mlp(module: torch.nn.Module) -> bool:
    act = getattr(module, "act_fn", None)
    return all(
        isinstance(getattr(module, name, None), torch.nn.Linear)
        for name in ("gate_proj", "up_proj", "down_proj")
    ) and (isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation")


def _gated_mlp(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    gate, up = module.gate_proj(x), module.up_proj(x)
    return module.down_proj(load_cpu_kernels().silu_mul(gate.contiguous(), up.contiguous()))


def fused_gated_mlp_forward(self: torch.nn.Module, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    if args or kwargs or not engaged(x, self.gate_proj.weight):
        return type(self).forward(self, x, *args, **kwargs)
    return _gated_mlp(self, x)


Fused = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]
ModuleTest = Callable[[torch.nn.Module], bool]
# kind: (which modules may take it, whether this one's own forward is reproduced, the forward installed)
_KINDS: dict[str, tuple[ModuleTest, ModuleTest, Callable[..., object]]] = {
    "rms_norm": (_is_rms_norm, lambda m: _reproduces(m, _rms_norm), fused_rms_norm_forward),
    "gated_mlp": (_is_gated_mlp, lambda m: _reproduces(m, _gated_mlp), fused_gated_mlp_forward),
    "attention": (
        fused_attention.is_llama_attention,
        fused_attention.reproduces,
        fused_attention.fused_attention_forward,
    ),
    "rotary": (fused_rotary.is_rotary_embedding, fused_rotary.reproduces, fused_rotary.fused_rotary_forward),
}


@torch.inference_mode()
def _reproduces(module: torch.nn.Module, fused: Fused) -> bool:
    """The kernel path against the module's own forward on random rows."""
    weight = next(module.parameters())
    if weight.dtype != torch.float32:
        return False
    width = _input_width(module)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(_PROBE_ROWS, width, generator=generator) * 3
    try:
        want = type(module).forward(module, x)
        got = fused(module, x)
    except (RuntimeError, TypeError, ValueError):  # a forward with other arguments is not this kind
        return False
    return reproduced(got, want)


def _input_width(module: torch.nn.Module) -> int:
    gate = getattr(module, "gate_proj", None)
    return gate.in_features if isinstance(gate, torch.nn.Linear) else module.weight.shape[0]
