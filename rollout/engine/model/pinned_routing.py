"""Mixture-of-experts routing pinned for the self-check: each router sees what it saw in the reference.

A router's top-k is a discontinuous choice. In bf16 a near-tied expert flips between any two
attention implementations (transformers' own eager and sdpa forwards differ by as much), and one flip
moves the logits far beyond the dtype's noise although both runs are right. The self-check asks
whether the engine runs the model's computation, so the reference forward records every router's
input and the engine's forward gets those rows back, token by token: both then choose the same
experts with the same weights, and everything else (attention, positions, experts, norms) is still
compared. The recording is one hidden-state row per router per checked token (kilobytes to tens of
megabytes for 7B-70B models); nothing is cast or copied besides.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import torch
from torch import nn

# transformers' router classes: MixtralTopKRouter, DeepseekV3TopkRouter, Llama4Router, JetMoeTopKGating...
_ROUTER_CLASS = re.compile(r"(Router|Gating)$")


def routers(model: nn.Module) -> list[nn.Module]:
    """The routers: router classes, and the `gate` or `router` beside an `experts` module."""
    found: dict[int, nn.Module] = {}
    for module in model.modules():
        if _ROUTER_CLASS.search(type(module).__name__):
            found[id(module)] = module
        children = dict(module.named_children())
        if "experts" in children:
            for name in ("gate", "router"):
                if name in children:
                    found[id(children[name])] = children[name]
    return list(found.values())


class RoutingPin:
    """Records the routers' inputs per checked sequence, then replays them into packed engine steps."""

    def __init__(self, model: nn.Module) -> None:
        self.routers = routers(model)
        # router -> sequence -> one [tokens, hidden] input per call of that router in the forward
        self.inputs: dict[nn.Module, list[list[torch.Tensor]]] = {r: [] for r in self.routers}
        self.rows: list[tuple[int, int]] = []  # the engine step's tokens: (sequence, position) per row
        self._calls: dict[nn.Module, int] = {}
        self.pinned = 0  # router calls whose input was replaced (0 when the model has no routers)

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Around the reference forward of one sequence (call once per sequence, in order)."""
        for router in self.routers:
            self.inputs[router].append([])

        def record(router: nn.Module, args: tuple) -> None:
            if args and isinstance(args[0], torch.Tensor):
                self.inputs[router][-1].append(args[0].detach().reshape(-1, args[0].shape[-1]).clone())

        with _hooks(self.routers, record):
            yield

    @contextlib.contextmanager
    def replaying(self, rows: list[tuple[int, int]]) -> Iterator[None]:
        """Around one engine step whose packed tokens are `rows`; a router call that does not line up
        with them (another row count or width) keeps its own input, which only makes the check stricter."""
        self.rows, self._calls = rows, {}

        def replay(router: nn.Module, args: tuple) -> tuple | None:
            call = self._calls.get(router, 0)
            self._calls[router] = call + 1
            pinned = self._recorded(router, call)
            if pinned is None or not args or not isinstance(args[0], torch.Tensor):
                return None
            x = args[0]
            if x.shape[:-1].numel() != pinned.shape[0] or x.shape[-1] != pinned.shape[1]:
                return None
            self.pinned += 1
            return (pinned.to(x.dtype).reshape(x.shape), *args[1:])

        with _hooks(self.routers, replay):
            yield

    def _recorded(self, router: nn.Module, call: int) -> torch.Tensor | None:
        per_sequence = self.inputs[router]
        parts = []
        for seq, pos in self.rows:
            calls = per_sequence[seq] if seq < len(per_sequence) else []
            if call >= len(calls) or pos >= calls[call].shape[0]:
                return None
            parts.append(calls[call][pos])
        return torch.stack(parts) if parts else None


@contextlib.contextmanager
def _hooks(modules: list[nn.Module], hook: object) -> Iterator[None]:
    handles = [m.register_forward_pre_hook(hook) for m in modules]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
