"""ColocatedGeneration: TRL's colocate mode, an engine inside each training process instead of a server.

Same contract and round logic as RolloutGeneration (sampling settings, the trained policy, the parity
probe, RolloutBatch), with the client swapped for the process's own `LLM` (colocated_engine.py). Each
process generates the GRPO groups its slice of the batch holds, whole (n = num_generations, one prefill per
prompt), and keeps its samples by index, so on one process the requests equal server mode's. With
`vllm_enable_sleep_mode` the engine sleeps between rounds (through the backward pass and optimizer step)
and wakes, weights first, before the next.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from rollout import LLM

from . import adapter_pushes, parity_probe
from .colocate_checks import engine_config
from .colocated_engine import SharedWeights, build_engine_llm, shares_weights
from .config import RolloutConfig
from .generation import RolloutGeneration, StaleWeightsError
from .image_prompts import has_images, with_images
from .probe_prompts import PROBE_TEXTS, probe_prompts
from .rollout_batch import RolloutBatch

logger = logging.getLogger(__name__)


class ColocatedGeneration(RolloutGeneration):
    """Generation and weight sync for GRPOTrainer through an engine in this process."""

    def __init__(self, trainer: Any, config: RolloutConfig) -> None:
        self.llm: LLM | None = None
        self.shared = False  # the engine serves the trainer's own parameter storage
        self.shared_weights: SharedWeights | None = None
        self.sleep_mode = bool(trainer.args.vllm_enable_sleep_mode)
        self.engine_config = engine_config(trainer.args, config, trainer.accelerator.process_index)
        super().__init__(trainer, config)

    # -- start-up -------------------------------------------------------------------------------

    def _init_vllm(self) -> None:
        self.sampling_params(1, max_tokens=self.max_completion_length or 1 << 30)  # fail fast
        model = self.accelerator.unwrap_model(self.model)
        sharded = self._dist.is_zero3 or self._dist.is_fsdp
        why = shares_weights(model, self.engine_config, sharded)
        self.shared = why is None
        if why is not None:
            logger.info("colocated engine: its own copy of the weights (%s)", why)
        processor = self.processing_class  # a VLM's processor: the engine runs its image processor too
        self.llm = build_engine_llm(model, processor, self.engine_config, self.shared, sharded)
        engine = self.llm.engine
        self.shared_weights = SharedWeights(engine.model) if self.shared else None
        self.server_dtype = next(engine.model.parameters()).dtype
        self.context_length = engine.max_model_len
        self.eos_token_ids_served = tuple(sorted(engine.model_info.eos_token_ids))
        self.vocab_size_served = engine.vocab_size
        params = self.sampling_params(1, max_tokens=self.max_completion_length or self.context_length)
        self.policy.start(params, self.eos_token_ids_served, self.vocab_size_served, self._tokenizer)
        self._sleep()

    @property
    def sleep_level(self) -> int:
        """2 discards the engine's own weights (the next sync writes them all); shared weights are never
        freed, and merged adapters need their kept base: 1."""
        return 1 if self.shared or self.llm.engine.adapters.adapted else 2

    # -- weight sync ----------------------------------------------------------------------------

    def sync_weights(self) -> None:
        """Shared weights: a new version over what the optimizer wrote. Otherwise the trainer's (gathered,
        PEFT-merged) weights written into the engine's own, atomically. The first sync is probed."""
        memory = self.llm.memory
        if "weights" in memory.asleep:
            self.llm.wake_up(tags=["weights"])
        if self.shared:
            self._follow_trainer()
            self.llm.engine.commit_weight_version()
        else:
            self._write_weights()
        self.pushed_version = self.llm.weight_version
        self.pushed_versions.append(self.pushed_version)
        if self.probe_due:
            self._wake()
            samples = self._probe_samples()
            self.probe_due = False
            self._probe_parity(samples, "after the first weight sync")
            self.probes += 1

    def _follow_trainer(self) -> None:
        """The engine's parameters at the trainer's storage again (after DDP's set-up); CUDA graphs, captured
        over the old addresses, captured again."""
        moved = self.shared_weights.follow(self.accelerator.unwrap_model(self.model))
        runner = self.llm.engine.local_runner
        if moved:
            logger.info("colocated engine: %d parameters follow the trainer's new storage", moved)
            if runner.decode_graphs is not None:
                runner.decode_graphs = None
                config = self.llm.engine.config
                runner.enable_decode_graphs(config.max_num_seqs, self.llm.engine.max_model_len, capture=True)

    def _write_weights(self) -> None:
        lora = None
        if self._adapter_pushes:
            named, lora = adapter_pushes.adapter_push(self.model, self.full_push_due, self.server_dtype)
        else:
            named = [(name, t.detach().to(self.server_dtype)) for name, t in self._iter_named_params()]
        self.llm.update_weights(named, lora=lora)
        self.full_push_due = False

    def _probe_samples(self) -> list[parity_probe.ProbeSample]:
        fits = max(1, self.context_length - parity_probe.PROBE_TOKENS)
        model = self.accelerator.unwrap_model(self.model)
        prompts = probe_prompts(self.processing_class, model, len(PROBE_TEXTS), fits)
        outputs = self.llm.generate(prompts.requests, parity_probe.probe_params())
        return parity_probe.probe_samples(prompts, [output.outputs for output in outputs])

    # -- generation -----------------------------------------------------------------------------

    def generate(
        self,
        prompts: list[list[int]],
        images: list | None,
        num_generations: int,
        profiler: AbstractContextManager | None = None,
    ) -> tuple[list[list[int]], list[list[int]], list[list[list[float]]], None]:
        """This process's slice: the groups it holds part of, generated whole, its samples kept."""
        if "weights" in self.llm.memory.asleep:  # level 2 discarded them: the trainer's again (TRL does too)
            self.sync_weights()
        self._wake()
        n, start = num_generations, self.accelerator.process_index * len(prompts)
        first = start // n
        groups: list[Any] = _groups(prompts, start, n)
        if has_images(images):  # the VLM path: each group's ids with its images, as the server takes them
            groups = with_images(groups, _group_images(images, start, n), 1)
        with profiler or nullcontext():
            outputs = self.llm.generate(groups, self.sampling_params(n))
        batch = RolloutBatch.of(outputs, n, {self.llm.weight_version}, self.policy.sampling_logprobs)
        if batch.stale:
            raise StaleWeightsError("the colocated engine generated with weights other than the synced ones")
        self._sleep()
        rows = [start + i - first * n for i in range(len(prompts))]  # group g, sample k: row g * n + k
        prompt_ids = [list(prompts[i]) for i in range(len(prompts))]
        logprobs = [[[lp] for lp in batch.logprobs[r]] for r in rows]  # vLLM's [token][top-k] layout
        return prompt_ids, [batch.completion_ids[r] for r in rows], logprobs, None

    def _wake(self) -> None:
        if self.llm.is_sleeping():
            self.llm.wake_up()

    def _sleep(self) -> None:
        if self.sleep_mode and not self.llm.is_sleeping():
            self.llm.sleep(level=self.sleep_level)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    @property
    def client(self) -> None:  # noqa: D102 - no server in colocate mode
        return None

    @client.setter
    def client(self, value: Any) -> None:
        assert value is None, "colocate mode has no RolloutClient"


def _groups(prompts: list[list[int]], start: int, n: int) -> list[list[int]]:
    """The prompt of each GRPO group the slice [start, start + len(prompts)) holds part of; TRL lays a
    group's n copies out consecutively from a multiple of n (RepeatSampler), which is checked."""
    groups: list[list[int]] = []
    for i, prompt in enumerate(prompts):
        group = (start + i) // n - start // n
        if group == len(groups):
            groups.append(list(prompt))
        elif list(prompt) != groups[group]:
            raise RuntimeError(
                f"prompt {start + i} differs from its GRPO group's first; TRL lays each prompt's "
                f"{n} generations out consecutively"
            )
    return groups


def _group_images(images: list, start: int, n: int) -> list:
    """Each group's images (those of its first row in the slice); its rows share one dataset example."""
    firsts = [i for i in range(len(images)) if i == 0 or (start + i) % n == 0]
    return [images[i] for i in firsts]
