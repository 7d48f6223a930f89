"""Runs a hybrid model's recurrent layers per sequence over the engine's packed batch.

The engine packs every scheduled sequence (prefill chunks and decodes) into one row. Attention reads
the paged cache through the packed metadata; a recurrent layer (a convolution, a scan) would run
across the boundaries between sequences. Each supported recurrent module's forward is wrapped once
at load: it splits its input at the step's sequence boundaries and calls the module's own forward
on each sequence with that sequence's states (state_pool.py) as the cache, then concatenates. The
model's code is unchanged; only its cache argument and the split are ours.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from torch import nn
from transformers import DynamicCache

from rollout.engine.hybrid.position_wise_layers import position_wise_layer_indices
from rollout.engine.hybrid.stacked_states import StackedStates
from rollout.engine.hybrid.state_pool import StatePool
from rollout.engine.hybrid.time_step_clamp import TimeStepClamp, time_step_clamp

# transformers' recurrent mixers that keep their state through the cache API (get/update conv and
# recurrent states), called as forward(hidden_states, <cache>, attention_mask, **kwargs).
SUPPORTED = frozenset(
    {
        "Lfm2ShortConv",
        "Qwen3NextGatedDeltaNet",
        "Qwen3_5GatedDeltaNet",
        "Qwen3_5MoeGatedDeltaNet",
        "Lfm2MoeShortConv",
        "JambaMambaMixer",
        "BambaMixer",
        "GraniteMoeHybridMambaLayer",
        "FalconH1Mixer",
        "NemotronHMamba2Mixer",
        "Mamba2Mixer",
        "MambaMixer",
        "FalconMambaMixer",
        "KimiLinearDeltaAttention",
        "Zamba2MambaMixer",
        "ZayaCCAProjection",
        "BailingHybridDeltaAttention",
    }
)
# Mixers whose multi-token path starts its scan from a zero state (Mamba's selective scan, which
# Jamba's reuses, takes no initial state): a chunk that continues a carried state goes through their
# one-token path, token by token, which is exact (only continued chunks: their one-token decode rows
# are batched like every mixer's). The load-time self-check prefills in chunks, so a mixer missing
# here that needed it would be refused, not run wrong (without it, fp32: Jamba 4.7e-4, Mamba 2.5e-3,
# Falcon-Mamba 4.3e-2).
_STEPWISE = frozenset({"JambaMambaMixer", "MambaMixer", "FalconMambaMixer"})
_CACHE_ARGS = ("cache_params", "past_key_values", "cache")  # "cache": transformers >= 5.24


@dataclass(frozen=True)
class Segment:
    """Rows [start, end) of the packed batch are one sequence's tokens; `states` its cache."""

    start: int
    end: int
    states: DynamicCache


_SEGMENTS: ContextVar[list[Segment] | None] = ContextVar("rollout_recurrent_segments", default=None)


@contextlib.contextmanager
def step_segments(segments: list[Segment]) -> Iterator[None]:
    """Makes `segments` the split every wrapped layer uses until the block exits."""
    token = _SEGMENTS.set(segments)
    try:
        yield
    finally:
        _SEGMENTS.reset(token)


def recurrent_modules(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if type(m).__name__ in SUPPORTED]


def wrap_recurrent_layers(model: nn.Module) -> int:
    """Wraps every supported recurrent module's forward (once); returns how many there are."""
    modules = recurrent_modules(model)
    for module in modules:
        if not getattr(module, "_rollout_wrapped", False):
            stepwise = type(module).__name__ in _STEPWISE
            clamp = time_step_clamp(module)
            module.forward = _per_sequence(
                module.forward, _arg_names(module), module.layer_idx, stepwise, clamp
            )
            module._rollout_wrapped = True
    return len(modules)


def _arg_names(module: nn.Module) -> tuple[str, ...]:
    """The forward's argument names, the cache's first (ZayaCCAProjection takes its arguments by position)."""
    params = list(inspect.signature(module.forward).parameters)[1:]
    return (next(name for name in _CACHE_ARGS if name in params), *params)


def _per_sequence(
    forward, names: tuple[str, ...], layer_idx: int, stepwise: bool, clamp: TimeStepClamp | None
):
    cache_arg, positional = names[0], names[1:]

    @functools.wraps(forward)
    def run(hidden_states: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        segments = _SEGMENTS.get()
        if segments is None:  # outside an engine step (the guard's probe): the module as it is
            return forward(hidden_states, *args, **kwargs)
        kwargs.update(zip(positional, args, strict=False))
        kwargs.pop(cache_arg, None)
        kwargs.pop("attention_mask", None)  # no padding inside a sequence's own rows
        total = hidden_states.shape[1]
        out = _Output(total)
        decodes = _stackable_decodes(segments, layer_idx)
        if decodes:  # one call for every one-token row that continues a state
            rows = torch.tensor([s.start for s in decodes], device=hidden_states.device)
            stacked = StackedStates([s.states for s in decodes], layer_idx)
            with _one_token(clamp, True):
                result = forward(hidden_states[0, rows][:, None], **{cache_arg: stacked})
            out.put(rows, [r[:, 0] for r in _tensors(result)])
            stacked.scatter()
        batched = set(map(id, decodes))
        for segment in (s for s in segments if id(s) not in batched):
            for p in _pieces(segment, stepwise and _carries_state(segment, layer_idx)):
                with _one_token(clamp, p.end - p.start == 1 and _carries_state(p, layer_idx)):
                    result = forward(
                        hidden_states[:, p.start : p.end], **{cache_arg: p.states}, **_cut(kwargs, p, total)
                    )
                out.put(slice(p.start, p.end), [r[0] for r in _tensors(result)])
        return out.result(tuple_output=isinstance(result, tuple))

    return run


def _one_token(clamp: TimeStepClamp | None, one_token: bool) -> contextlib.AbstractContextManager:
    """Around a call that takes the mixer's one-token update (one row continuing a state): the
    chunked scan's time-step limit kept there too (time_step_clamp.py)."""
    return clamp.one_token() if clamp is not None and one_token else contextlib.nullcontext()


class _Output:
    """A layer's output over the packed rows, filled piece by piece: one tensor [1, rows, ...], or several
    (ZayaCCAProjection returns query, key and value)."""

    def __init__(self, total: int) -> None:
        self.total, self.tensors = total, []

    def put(self, rows: torch.Tensor | slice, pieces: list[torch.Tensor]) -> None:
        if not self.tensors:
            self.tensors = [p.new_empty((self.total, *p.shape[1:])) for p in pieces]
        for tensor, piece in zip(self.tensors, pieces, strict=True):
            tensor[rows] = piece

    def result(self, tuple_output: bool) -> torch.Tensor | tuple[torch.Tensor, ...]:
        tensors = tuple(t[None] for t in self.tensors)
        return tensors if tuple_output else tensors[0]


def _tensors(result: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return result if isinstance(result, tuple) else (result,)


def _stackable_decodes(segments: list[Segment], layer_idx: int) -> list[Segment]:
    """The whole one-token segments that continue a state, when there are at least two (a lone one runs
    as it is). Filtered before any segment is cut into tokens (`_pieces`): a batched row runs once."""
    decodes = [s for s in segments if s.end - s.start == 1 and _carries_state(s, layer_idx)]
    return decodes if len(decodes) >= 2 else []


def _carries_state(segment: Segment, layer_idx: int) -> bool:
    return segment.states.get_conv_state(layer_idx) is not None


def _pieces(segment: Segment, one_by_one: bool) -> list[Segment]:
    if not one_by_one:
        return [segment]
    return [Segment(row, row + 1, segment.states) for row in range(segment.start, segment.end)]


def _cut(kwargs: dict[str, object], segment: Segment, total: int) -> dict[str, object]:
    return {k: _rows(v, segment, total) for k, v in kwargs.items()}


def _rows(value: object, segment: Segment, total: int) -> object:
    """Per-token tensors ([1, T, ...]) are cut to the segment; everything else passes as it is."""
    if (
        isinstance(value, torch.Tensor)
        and value.dim() >= 2
        and value.shape[1] == total
        and value.shape[0] == 1
    ):
        return value[:, segment.start : segment.end]
    return value


def segments(query_lens: list[int], states: list[DynamicCache]) -> list[Segment]:
    """The packed rows of each sequence of a step, in batch order, with its states."""
    out, start = [], 0
    for length, state in zip(query_lens, states, strict=True):
        out.append(Segment(start, start + length, state))
        start += length
    return out


def hybrid_state_pool(model: nn.Module, capacity: int) -> StatePool | None:
    """For a model with recurrent layers: wraps them and returns the pool of their states; else None."""
    if not wrap_recurrent_layers(model):
        return None
    return StatePool(model.config.get_text_config(), capacity)


def is_within_supported(model: nn.Module, module_name: str) -> bool:
    """True when the module named `module_name` is, contains or sits inside a supported recurrent module."""
    supported = [name for name, m in model.named_modules() if type(m).__name__ in SUPPORTED]
    return any(
        module_name == name or module_name.startswith(name + ".") or name.startswith(module_name + ".")
        for name in supported
    )


def recurrent_layer_indices(model: nn.Module) -> frozenset[int]:
    """Layers whose only sequence mixing is a supported recurrent module (no attention, no KV); a layer
    that runs attention beside its recurrent module (Falcon-H1) is not one of them."""
    recurrent = {m.layer_idx for m in recurrent_modules(model)}
    attention = {
        m.layer_idx for m in model.modules() if getattr(m, "is_causal", False) and hasattr(m, "layer_idx")
    }
    return frozenset(recurrent - attention)


def attention_layer_indices(model: nn.Module) -> list[int]:
    """The layers that must call attention once each: every layer of a plain model; of a hybrid, all but
    its recurrent layers and its position-wise ones (position_wise_layers.py)."""
    skip = recurrent_layer_indices(model) | position_wise_layer_indices(model)
    return [i for i in range(model.config.get_text_config().num_hidden_layers) if i not in skip]
