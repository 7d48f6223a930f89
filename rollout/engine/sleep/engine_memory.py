"""EngineMemory: the engine's memory under two tags, "weights" and "kv_cache", given back and taken again.

vLLM's sleep mode: `sleep(level=1)` discards the KV cache (prefix cache included) and moves the weights off
the device (on a CPU they stay: there is nowhere cheaper to put them); `sleep(level=2)` discards the
weights too, and the next weight update restores them. `wake_up(tags)` takes memory back, weights first.
Nothing sleeping ever serves: generating needs both tags awake and, after level 2, every parameter written
again (the woken weights are NaN until then, so one left out is found and named, not served).
Called between engine steps with no request in flight (the LLM's lock, the server loop's jobs).
"""

from __future__ import annotations

from typing import Protocol

import torch
from transformers import PreTrainedModel

from rollout.config import EngineConfig
from rollout.engine.sleep.host_memory import give_back
from rollout.engine.sleep.released_storage import ReleasedStorage, nbytes, release
from rollout.weights.adapter_store import AdapterStore

TAGS = ("weights", "kv_cache")
_NAN_BYTE = 0xFF  # every float dtype's all-ones pattern is a NaN


class SleepingRunner(Protocol):
    """The engine's local ModelRunner, as sleep mode sees it."""

    device: torch.device
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]
    decode_graphs: object | None

    def enable_decode_graphs(self, max_num_seqs: int, max_model_len: int, capture: bool) -> bool: ...


class SleepingEngine(Protocol):
    """What sleep mode reads of the LLMEngine (named here: the engine's package top is not imported)."""

    config: EngineConfig
    model: PreTrainedModel
    local_runner: SleepingRunner
    runner: object  # the local runner itself, unless a tensor-parallel driver wraps it
    adapters: AdapterStore
    max_model_len: int
    weight_version: int

    def has_unfinished_requests(self) -> bool: ...

    def reset_prefix_cache(self) -> None: ...


class SleepModeError(RuntimeError):
    """The call cannot run in the engine's sleep state (the message says which tags sleep and what to call)."""


class EngineMemory:
    def __init__(self, engine: SleepingEngine, weights_shared: bool = False) -> None:
        """`weights_shared`: the engine serves storage it does not own (a colocated trainer's parameters);
        sleep never frees it, at any level."""
        self.engine = engine
        self.weights_shared = weights_shared
        self.level = 0
        self.asleep: set[str] = set()
        self._released: dict[str, list[ReleasedStorage]] = {}
        self._unrestored: list[tuple[str, torch.Tensor]] = []  # level 2: parameters no update wrote yet
        self._checked_version = -1  # the weight version `_unrestored` was last pruned at
        self._had_graphs = False

    def is_sleeping(self) -> bool:
        return bool(self.asleep)

    def sleep(self, level: int = 1) -> int:
        """Frees the KV cache and (level 1, on a GPU) offloads or (level 2) discards the weights; returns
        the bytes freed. Refused, with nothing changed, while requests are in flight or already asleep."""
        self._check_can_sleep(level)
        engine, runner = self.engine, self.engine.local_runner
        engine.reset_prefix_cache()
        self._had_graphs = self._had_graphs or runner.decode_graphs is not None
        runner.decode_graphs = None  # captured over the addresses being freed
        kv = [t for pair in runner.kv_caches for t in pair]
        freed = nbytes(kv)
        self._released["kv_cache"] = release(kv, keep_copy=False)
        if not self.weights_shared and (level == 2 or runner.device.type != "cpu"):
            params = list(engine.model.parameters())
            freed += nbytes(params)
            self._released["weights"] = release(params, keep_copy=level == 1)
        self.level, self.asleep = level, set(TAGS)
        give_back(runner.device)
        return freed

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Takes memory back for `tags` (default: all), weights before the KV cache, so an update between
        `wake_up(tags=["weights"])` and `wake_up(tags=["kv_cache"])` never holds both."""
        wanted = check_tags(tags)
        for tag in TAGS:  # in this order
            if tag in wanted and tag in self.asleep:
                self._wake(tag)
        if not self.asleep:
            self.level = 0
            self._recapture_graphs()

    def check_can_generate(self) -> None:
        """SleepModeError unless every tag is awake and no parameter still waits for its update."""
        if self.asleep:
            raise SleepModeError(
                f"the engine is sleeping (level {self.level}; asleep: {', '.join(sorted(self.asleep))}): "
                "call wake_up() before generating"
            )
        if self.awaiting_weights():
            names = ", ".join(name for name, _ in self._unrestored[:3])
            raise SleepModeError(
                f"sleep(level=2) discarded the weights and {len(self._unrestored)} parameters were not "
                f"written since (e.g. {names}): update_weights with every parameter before generating"
            )

    def serving(self) -> bool:
        """Both tags awake and every parameter restored: a server admits requests only then."""
        return not self.asleep and not self.awaiting_weights()

    def check_can_update(self) -> None:
        """Updates write into the weights' memory: it must be awake (vLLM: wake_up(tags=["weights"]) first)."""
        if "weights" in self.asleep:
            raise SleepModeError(
                f"the weights are asleep (sleep level {self.level}): call wake_up(tags=['weights']) "
                "before updating them"
            )

    def awaiting_weights(self) -> bool:
        """Awake, but parameters sleep(level=2) discarded that no update wrote since (re-checked once per version)."""
        if self._unrestored and self._checked_version != self.engine.weight_version:
            self._checked_version = self.engine.weight_version
            self._unrestored = [(n, p) for n, p in self._unrestored if bool(torch.isnan(p).all())]
        return bool(self._unrestored)

    def _check_can_sleep(self, level: int) -> None:
        engine = self.engine
        check_level(level)
        if self.asleep:
            raise SleepModeError(f"already sleeping (level {self.level}): call wake_up() first")
        if engine.runner is not engine.local_runner:
            raise SleepModeError("sleep mode is not supported with tensor_parallel_size > 1")
        if engine.has_unfinished_requests():
            raise SleepModeError("requests are in flight: finish or abort them before sleep()")
        if level == 2 and not self.weights_shared and engine.adapters.adapted:
            raise SleepModeError(
                "sleep(level=2) would discard the base weights LoRA adapters are merged into; use level=1"
            )
        if level == 2 and any(not p.is_floating_point() for p in engine.model.parameters()):
            raise SleepModeError("sleep(level=2) needs floating-point parameters (quantized ones: level=1)")

    def _wake(self, tag: str) -> None:
        level2_weights = tag == "weights" and self.level == 2
        for item in self._released.pop(tag, []):
            item.restore(fill=_NAN_BYTE if level2_weights else 0)
        if level2_weights and not self.weights_shared:
            self._unrestored = list(self.engine.model.named_parameters())
            self._checked_version = self.engine.weight_version
        self.asleep.discard(tag)

    def _recapture_graphs(self) -> None:
        if self._had_graphs:
            engine = self.engine
            engine.local_runner.enable_decode_graphs(engine.config.max_num_seqs, engine.max_model_len, True)
            self._had_graphs = False


def check_level(level: int) -> None:
    if level not in (1, 2):
        raise ValueError(f"level must be 1 or 2, got {level!r}")


def check_tags(tags: list[str] | None) -> set[str]:
    if tags is None:
        return set(TAGS)
    if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
        raise ValueError(f"tags must be a list of tag names ({', '.join(TAGS)}) or None, got {tags!r}")
    unknown = sorted(set(tags) - set(TAGS))
    if unknown:
        raise ValueError(f"tags: unknown {', '.join(unknown)}; known: {', '.join(TAGS)}")
    return set(tags)
