"""Why the self-check refuses a model: where the engine's forward first departs from the model's own.

Run only on a refusal. Two questions, each answered by running the forwards again:
- Positions: the engine passes every token's index as `position_ids`; a model that numbers positions its
  own way when given none (RoBERTa's offset, a decoder that counts from its cache) agrees with the engine
  once the reference is given those ids too. Then that is the cause, and the module that reacts is named.
- Otherwise, the first point where the two forwards jump apart, and on which kind of step: every module's
  input and output rows are fingerprinted in both forwards (a fixed random projection of each token's row,
  not the activations themselves) and compared token by token, in the reference's order; a module whose
  input already differs points at its parent's own code, between its children.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from transformers import PreTrainedModel

from rollout.engine.kv.kv_cache import KVCacheSpec
from rollout.engine.model import check_forwards
from rollout.engine.model.check_plan import KINDS, CheckPlan
from rollout.engine.model.pinned_routing import RoutingPin
from rollout.ops.attention_backend import AttentionBackend

# A departure: rows that differ (relative to their norm) by at least FLOOR and JUMP times more than at
# any earlier point of the forward.
FLOOR = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 3e-2}
JUMP = 10.0
_PROJECTIONS = 4
Key = tuple[str, str, int]  # ("in" or "out", module name, call index within one forward)
Row = tuple[int, int]  # (checked sequence, position)


def diagnose(
    model: PreTrainedModel,
    spec: KVCacheSpec,
    backend: AttentionBackend,
    block_size: int,
    plan: CheckPlan,
    got: list[torch.Tensor],
    tolerance: float,
) -> str:
    """One clause naming the cause, for the refusal's message."""
    lengths = [len(s) for s in plan.seqs]
    plain, numbered = Fingerprints(model, lengths), Fingerprints(model, lengths)
    pin = RoutingPin(model)
    check_forwards.eager_logits(model, plan.seqs, pin, plain.eager)
    with_ids = check_forwards.eager_logits(
        model, plan.seqs, RoutingPin(model), numbered.eager, positions=True
    )
    if max(g.max().item() for g in check_forwards.position_gaps(model.dtype, got, with_ids)) <= tolerance:
        reacts = plain.first_departure(numbered, model.dtype)
        where = f" (the first to change is {reacts})" if reacts else ""
        return (
            "the cause is positions: the model numbers its tokens its own way when given no position_ids, and "
            f"agrees with the engine once given 0..n-1, the token indices the engine passes{where}"
        )
    check_forwards.engine_logits(model, spec, backend, block_size, plan, [pin.replaying, plain.engine])
    departure = plain.first_departure(plain, model.dtype, plan)
    if departure is None:
        return (
            "no module's output departs beyond rounding on its own: rounding differences grow through the "
            "model to this gap (its forward is that sensitive to the order of its sums)"
        )
    return f"it starts in {departure}"


class Fingerprints:
    """Per module call, each checked token's input and output rows projected on a few fixed random
    directions (and their norms), recorded from the reference forward (`eager`) and the engine's packed
    steps (`engine`). These hooks run first, so they see a module's own output before any hook of the
    engine's changes it (time_step_clamp.py clamps an input projection's output on purpose)."""

    def __init__(self, model: nn.Module, lengths: list[int]) -> None:
        self.lengths = lengths
        self.modules = {module: name for name, module in model.named_modules() if name}
        self.labels = {name: f"{name} ({type(m).__name__})" for m, name in self.modules.items()}
        self.sides: dict[str, dict[Key, dict[Row, torch.Tensor]]] = {"eager": {}, "engine": {}}
        self.order: list[Key] = []  # the reference's inputs and outputs, in the order they happen
        self._directions: dict[tuple[int, torch.device], torch.Tensor] = {}

    def eager(self, seq: int) -> contextlib.AbstractContextManager:
        length = self.lengths[seq]
        return self._capture(
            "eager", lambda count: [(seq, p) for p in range(count)] if count == length else None
        )

    def engine(self, rows: list[Row]) -> contextlib.AbstractContextManager:
        return self._capture("engine", lambda count: rows if count == len(rows) else None)

    @contextlib.contextmanager
    def _capture(self, side: str, rows_for) -> Iterator[None]:
        calls: dict[str, int] = {}

        def record(key: Key, value: object) -> None:
            tensor = next((t for t in _tensors(value) if t.is_floating_point()), None)
            per_token = _per_token(tensor)
            rows = rows_for(per_token.shape[0]) if per_token is not None else None
            if rows is None:
                return
            if side == "eager" and key not in self.sides["eager"]:
                self.order.append(key)
            stored = self.sides[side].setdefault(key, {})
            for row, value in zip(rows, self._project(per_token), strict=True):
                stored[row] = value

        def before(module: nn.Module, args: tuple) -> None:
            name = self.modules[module]
            record(("in", name, calls.get(name, 0)), args)

        def after(module: nn.Module, args: tuple, output: object) -> None:
            name = self.modules[module]
            calls[name] = calls.get(name, 0) + 1
            record(("out", name, calls[name] - 1), output)

        handles = [m.register_forward_pre_hook(before, prepend=True) for m in self.modules]
        handles += [m.register_forward_hook(after, prepend=True) for m in self.modules]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _project(self, rows: torch.Tensor) -> torch.Tensor:
        flat = rows.detach().reshape(rows.shape[0], -1).double()
        key = (flat.shape[1], flat.device)
        if key not in self._directions:
            generator = torch.Generator().manual_seed(flat.shape[1])
            directions = torch.randn(flat.shape[1], _PROJECTIONS, generator=generator, dtype=torch.float64)
            self._directions[key] = directions.to(flat.device)
        return torch.cat([flat @ self._directions[key], flat.norm(dim=1, keepdim=True)], dim=1).cpu()

    def first_departure(
        self, other: Fingerprints, dtype: torch.dtype, plan: CheckPlan | None = None
    ) -> str | None:
        """Where the rows first jump apart between this reference and `other`'s engine side (with `plan`) or
        `other`'s reference (without), and on which kinds of step. Points are every module's input and
        output, in the reference's order; a departure is a point whose rows differ by JUMP times more than
        at any point before it (rounding grows gently along the forward, a wrong computation jumps)."""
        side = other.sides["engine" if plan is not None else "eager"]
        floor = FLOOR.get(dtype, FLOOR[torch.bfloat16])
        before = 0.0
        for key in self.order:
            gaps = self._gaps(key, side)
            if not gaps:
                continue
            worst = max(gaps.values())
            if worst >= max(floor, JUMP * before) or worst != worst:
                return self._where(key, [row for row, gap in gaps.items() if not gap < floor], plan)
            before = max(before, worst)
        return None

    def _where(self, key: Key, rows: list[Row], plan: CheckPlan | None) -> str:
        point, name, _ = key
        if point == "in":  # arose in the parent's own code, before it called this module
            parent, _, child = name.rpartition(".")
            where = f"the code of {self.labels.get(parent, 'the model')} before it calls its {child}"
        else:
            where = self.labels[name]
        if plan is None:
            return where
        kinds = [kind for kind in KINDS if any(plan.kinds(seq)[pos] == kind for seq, pos in rows)]
        return f"{where}, on {' and '.join(kind + 's' for kind in kinds)}"

    def _gaps(self, key: Key, other: dict[Key, dict[Row, torch.Tensor]]) -> dict[Row, float]:
        """Per row, the projections' difference against the row's norm (a projection of a vector v on a
        random normal direction is about |v|): a small row departing counts as much as a large one."""
        want, got = self.sides["eager"].get(key, {}), other.get(key, {})
        return {
            row: ((got[row] - want[row])[:-1].abs().max() / want[row][-1].clamp_min(1e-30)).item()
            for row in want
            if row in got and got[row].shape == want[row].shape
        }


def _tensors(output: object) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (tuple, list)):
        return [t for t in output if isinstance(t, torch.Tensor)]
    return []


def _per_token(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """A module output's rows, one per token: [1, T, ...] or [T, ...]; None when it has none."""
    if tensor is None or tensor.dim() < 2:
        return None
    return tensor[0] if tensor.dim() >= 3 and tensor.shape[0] == 1 else tensor
