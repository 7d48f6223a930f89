"""The rotary embedding's cos and sin read from a table inside the engine.

transformers computes the cos and sin of every position at every forward (a product, a concatenation,
two transcendental passes, scaling and casts, behind a decorator): on a CPU decode step of a small
model, as much time as a decoder layer's norms. Where the frequencies are fixed they depend on the
position alone, so the engine reads them from a table that the module's own forward filled for
positions 0..N-1 (N grows by doubling when a position passes it). Rope types that rescale with the
sequence length (dynamic, longrope) and per-layer-type modules keep transformers' forward; a module
takes the table only when it reproduces the module's own forward on a probe (fused_modules.py).
"""

from __future__ import annotations

import torch

from rollout.hf.fused_checks import engaged, reproduced

_FIRST_ROWS = 1024  # the table's first size; it doubles past the largest position seen
_PROBE_POSITIONS = (0, 1, 17, 1023, 1024, 3001)  # across a growth of the table
_RESCALING = ("dynamic", "longrope")  # transformers' dynamic_rope_update changes their frequencies


def is_rotary_embedding(module: torch.nn.Module) -> bool:
    """A rotary embedding whose frequencies never change after load."""
    rope_type = getattr(module, "rope_type", None)
    return (
        type(module).__name__.endswith("RotaryEmbedding")
        and isinstance(module._buffers.get("inv_freq"), torch.Tensor)
        and isinstance(rope_type, str)
        and not any(kind in rope_type for kind in _RESCALING)
        and not module._parameters
    )


def fused_rotary_forward(
    self: torch.nn.Module, x: torch.Tensor, position_ids: torch.Tensor, *args, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    if (
        args
        or kwargs
        or position_ids.dim() != 2
        or position_ids.shape[0] != 1
        or not engaged(x, self.inv_freq)
    ):
        return type(self).forward(self, x, position_ids, *args, **kwargs)
    return _lookup(self, position_ids)


@torch.inference_mode()
def reproduces(module: torch.nn.Module) -> bool:
    """The table against the module's own forward, on positions on both sides of a growth."""
    if module.inv_freq.dtype != torch.float32 or module.inv_freq.device.type != "cpu":
        return False
    positions = torch.tensor([_PROBE_POSITIONS])
    x = torch.randn(1, positions.shape[1], 8)  # not the table's empty x: a forward that reads x is refused
    try:
        want = type(module).forward(module, x, positions)
        got = _lookup(module, positions)
    except (RuntimeError, TypeError, ValueError, IndexError):  # another signature: not this kind
        return False
    if not (isinstance(want, tuple) and len(want) == 2):
        return False
    return all(reproduced(g, w) for g, w in zip(got, want, strict=True))


def _lookup(module: torch.nn.Module, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [1, T, dim] of positions [1, T], from the module's table."""
    positions = position_ids[0]
    cos, sin = _table(module, int(positions.max()) + 1 if positions.numel() else 0)
    return cos.index_select(0, positions)[None], sin.index_select(0, positions)[None]


def _table(module: torch.nn.Module, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The module's cos and sin for positions [0, N), N >= rows; rebuilt if its frequencies were edited."""
    version = module.inv_freq._version
    cached = module.__dict__.get("_rollout_rotary_table")
    if cached is None or cached[0].shape[0] < rows or cached[2] != version:
        size = max(_FIRST_ROWS, 1 << max(rows - 1, 0).bit_length())
        # the forward reads only x's device and dtype
        cos, sin = type(module).forward(module, torch.empty(0), torch.arange(size)[None])
        cached = (cos[0].contiguous(), sin[0].contiguous(), version)
        module.__dict__["_rollout_rotary_table"] = cached
    return cached[0], cached[1]
