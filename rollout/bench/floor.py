"""The matmul floor: the time a run spends in the model's linear layers, timed directly.

Hooks around every `nn.Linear` of the model time each call during one run of a system: the wall
time of the projections and MLPs (and the output layer) for exactly the tokens that system computes.
A mixture-of-experts block whose experts are stacked weights (transformers' `*Experts` modules, run
by grouped matmuls rather than `nn.Linear`) is timed as a whole: its matmuls and the routing of tokens
to them, so for MoE models the floor leans high.
A generation system cannot be faster than that without faster matmuls; everything above it
(attention, sampling, scheduling, Python) is overhead the floor makes visible.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def linear_seconds(model: torch.nn.Module, run: Callable[[], object]) -> float:
    """Total wall time of `model`'s linear layers during one call of `run`."""
    total = 0.0
    started: dict[int, float] = {}
    sync = torch.cuda.synchronize if next(model.parameters()).is_cuda else (lambda: None)

    def before(module: torch.nn.Module, args: object) -> None:
        sync()
        started[id(module)] = time.perf_counter()

    def after(module: torch.nn.Module, args: object, output: object) -> None:
        nonlocal total
        sync()
        total += time.perf_counter() - started.pop(id(module))

    timed = matmul_modules(model)
    handles = [m.register_forward_pre_hook(before) for m in timed]
    handles += [m.register_forward_hook(after) for m in timed]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return total


def matmul_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Every `nn.Linear`, and every stacked-weight experts module (no `nn.Linear` inside to count twice)."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    experts = [
        m
        for m in model.modules()
        if type(m).__name__.endswith("Experts")
        and not any(isinstance(c, torch.nn.Linear) for c in m.modules())
        and any(p.dim() == 3 for p in m.parameters(recurse=False))
    ]
    return linears + experts
