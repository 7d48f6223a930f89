"""Pushes travel in the server's dtype: an fp32 trainer (TRL's default load) feeds a bf16 server.

The server validates dtypes strictly and never converts, so the trainer casts each floating tensor
before sending it; the trainer's own parameters are untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

logger = logging.getLogger(__name__)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def server_dtype(infos: Sequence[Any], addresses: Sequence[str]) -> torch.dtype | None:
    """The one dtype every server runs in (None if a server does not say); refuses servers that differ."""
    names = {address: info.dtype for address, info in zip(addresses, infos, strict=True)}
    if len(set(names.values())) > 1:
        raise ValueError(
            f"the rollout servers run in different dtypes ({names}); start them all with the same "
            "`rollout serve --dtype`, so one push fits every server."
        )
    name = next(iter(names.values()), "")
    dtype = getattr(torch, name, None) if name else None
    return dtype if isinstance(dtype, torch.dtype) else None


def cast(named: list[tuple[str, torch.Tensor]], dtype: torch.dtype | None) -> list[tuple[str, torch.Tensor]]:
    """Each floating tensor in `dtype` (others as they are); logs what it cast, once per push."""
    if dtype is None:
        return named
    changed = sorted({dtype_name(t.dtype) for _, t in named if t.is_floating_point() and t.dtype != dtype})
    if not changed:
        return named
    logger.info(
        "rollout: casting pushed weights from %s to the server's %s", "/".join(changed), dtype_name(dtype)
    )
    return [(name, t.to(dtype) if t.is_floating_point() else t) for name, t in named]
