"""RolloutGeneration: TRL's vLLM server-mode backend with the vLLM client swapped for RolloutClient.

GRPOTrainer talks to its generation backend through two calls, `sync_weights()` and
`generate(prompt_ids, images, num_generations)`, and gates its importance-sampling correction on
`use_vllm`. Subclassing `VLLMGeneration` keeps TRL's own parameter gathering (DeepSpeed ZeRO-3,
FSDP1/2, PEFT merge and name normalization) and its gather/broadcast layout across processes;
only the two calls that reach a server are replaced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from accelerate.utils import broadcast_object_list, gather_object, is_peft_model
from trl.generation.vllm_generation import VLLMGeneration

from rollout.client import RolloutClient
from rollout.client.weight_push import WeightSyncError
from rollout.engine.sample.bad_words import with_bad_words_tokenized
from rollout.sampling_params import SamplingParams

from . import adapter_pushes, parity_probe, push_dtype, server_checks, server_restarts
from .async_rounds import AsyncRounds
from .config import RolloutConfig
from .generation_kwargs import (
    LOGITS_PROCESSOR_KWARGS,
    logits_processor_kwargs,
    refusal_reasons,
    with_trl_regex,
)
from .image_prompts import has_images, with_images
from .probe_prompts import PROBE_TEXTS, probe_prompts
from .rollout_batch import RolloutBatch
from .text_settings import TEXT_GENERATION_KWARGS
from .trained_policy import TrainedPolicy

logger = logging.getLogger(__name__)

# generation_kwargs keys (vLLM SamplingParams names) that have a rollout equivalent, same meaning.
# Stop strings end the returned token ids at the token that completed the match, as vLLM's do.
SUPPORTED_GENERATION_KWARGS = (
    "seed",
    "stop_token_ids",
    "ignore_eos",
    *LOGITS_PROCESSOR_KWARGS,
    *TEXT_GENERATION_KWARGS,
)
# Restarts ridden out in a row within one push or one round before training stops.
MAX_RECOVERIES = 3


class StaleWeightsError(RuntimeError):
    """The server generated with weights other than the ones the trainer last pushed."""


class RolloutGeneration(VLLMGeneration):
    """Generation and weight sync for GRPOTrainer through a rollout server."""

    def __init__(self, trainer: Any, config: RolloutConfig) -> None:
        self.rollout_config = config
        self.eos_token_ids = tuple(int(t) for t in trainer.eos_token_ids if t is not None)
        self.client: RolloutClient | None = None
        self.pushed_version: int | None = None
        self.pushed_versions: list[int] = []  # every version this trainer pushed, oldest first
        self.async_rounds: AsyncRounds | None = None  # set by the trainer in async mode
        self.served_versions: dict[str, int] = {}  # per server address, right after our last push
        self.probe_due = config.parity_probe  # after the first push and after a server restarted
        self.full_push_due = True  # PEFT adapter pushes: the base too (first push, restart, other writer)
        self.probes = 0
        self.watch: server_restarts.RestartWatch | None = None  # main process: restarts since the last checks
        self.recoveries = 0  # servers brought back (restarted, or gone and back) during training
        self.server_dtype: torch.dtype | None = None  # main process: what pushes are cast to
        self.context_length: int | None = None  # main process: the servers' smallest max_model_len
        self.eos_token_ids_served: tuple[int, ...] = ()  # the servers' EOS ids (what min_tokens bans)
        self.vocab_size_served: int | None = None
        args = trainer.args
        self.policy = TrainedPolicy.of(trainer, config)
        super().__init__(
            model=trainer.model,
            accelerator=trainer.accelerator,
            processing_class=trainer.processing_class,
            mode="server",
            structured_outputs_regex=args.vllm_structured_outputs_regex,
            repetition_penalty=trainer.repetition_penalty,
            temperature=trainer.temperature,
            top_p=trainer.top_p,
            top_k=trainer.top_k,
            min_p=trainer.min_p,
            max_completion_length=trainer.max_completion_length,
            logprobs=0,
            generation_kwargs=args.generation_kwargs,
        )

    # -- start-up -------------------------------------------------------------------------------

    def _init_vllm(self) -> None:
        """Connects (main process only) and checks the server hosts the trainer's model."""
        # fail fast on unsupported generation settings, everywhere (min_tokens is checked against the
        # completion length; without one, the servers' context bounds it)
        self.sampling_params(1, max_tokens=self.max_completion_length or 1 << 30)
        if self.accelerator.is_main_process:
            self.client = server_checks.connect(self.rollout_config)
            self.watch = server_restarts.RestartWatch(self.client)
            infos = server_checks.check_server(self.client, self.model, self._tokenizer, self.rollout_config)
        self._set_facts(infos if self.accelerator.is_main_process else None)
        params = self.sampling_params(1, max_tokens=self.max_completion_length or self.context_length)
        self.policy.start(params, self.eos_token_ids_served, self.vocab_size_served, self._tokenizer)

    def _set_facts(self, infos: list[Any] | None) -> None:
        """What pushes, requests and the replay need to know of the servers (main process's `infos`), everywhere."""
        facts = None
        if infos is not None:
            facts = (
                push_dtype.server_dtype(infos, self.client.addresses),
                min(i.max_model_len for i in infos),
                server_checks.same_eos_token_ids(infos, self.client.addresses),
                infos[0].vocab_size,
            )
        self.server_dtype, self.context_length, self.eos_token_ids_served, self.vocab_size_served = (
            self._broadcast(facts)
        )

    @property
    def _tokenizer(self) -> Any:
        return getattr(self.processing_class, "tokenizer", self.processing_class)

    def sampling_params(self, n: int, max_tokens: int | None = None) -> SamplingParams:
        """GRPOConfig's sampling settings as rollout SamplingParams (what TRL sends vLLM).

        `max_completion_length=None` means "up to the context": the servers stop a sample when
        prompt + completion fill their max_model_len.
        """
        unsupported = sorted(set(self.generation_kwargs) - set(SUPPORTED_GENERATION_KWARGS))
        if unsupported:
            raise ValueError(
                f"generation_kwargs {unsupported} have no rollout equivalent; supported: "
                f"{SUPPORTED_GENERATION_KWARGS}{refusal_reasons(unsupported)}"
            )
        extra = with_trl_regex(logits_processor_kwargs(self.generation_kwargs), self.structured_outputs_regex)
        eos = () if extra.get("ignore_eos") else self.eos_token_ids  # ignore_eos: EOS must not stop either
        stop_token_ids = tuple(extra.pop("stop_token_ids", ())) + eos
        params = SamplingParams(
            n=n,
            max_tokens=max_tokens or self.max_completion_length or self.context_length,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k or 0,
            min_p=self.min_p or 0.0,
            repetition_penalty=self.repetition_penalty,
            stop_token_ids=tuple(dict.fromkeys(stop_token_ids)),
            logprobs=0,
            logprobs_mode="processed",  # what TRL's importance-sampling correction expects
            **extra,
        )
        # bad_words tokenized here, once, so the servers ban and the replay replays the very same ids
        return with_bad_words_tokenized(params, self._tokenizer)

    # -- weight sync ----------------------------------------------------------------------------

    def sync_weights(self) -> None:
        """Pushes the trainer's (gathered, PEFT-merged) weights; every process takes part in the gather.

        The first push, and the first after a server restarted, is followed by the parity probe. A
        server that restarted or stopped answering before or during the push or the probe is waited
        for and checked again, then pushed to and probed again (`_recover`).
        """
        for _ in range(MAX_RECOVERIES + 1):
            if self._synced():
                return
            self._recover()
        raise server_checks.RolloutServerUnavailable(
            f"the rollout servers at {', '.join(self.rollout_config.addresses)} restarted "
            f"{MAX_RECOVERIES + 1} times in a row during one weight push; training stops"
        )

    def _synced(self) -> bool:
        """One push, then the probe if due; False when a server restarted or went away meanwhile."""
        is_main = self.accelerator.is_main_process
        if not self._broadcast(self._push_watching() if is_main else self._gather_only()):
            return False
        if not self.probe_due:
            return True
        samples = self._broadcast(self._watching(self._probe_samples) if is_main else None)
        if samples is None:
            return False
        self.probe_due = False
        self._probe_parity(
            samples, "after the first weight push" if self.probes == 0 else "after a server restart"
        )
        self.probes += 1
        return True

    def _recover(self) -> None:
        """Main process: waits for the servers and re-runs the start-up checks; the next push is probed."""
        infos = None
        if self.accelerator.is_main_process:
            self.watch, infos = server_restarts.recheck(
                self.client, self.model, self._tokenizer, self.rollout_config
            )
        self._set_facts(infos)
        self.probe_due = self.rollout_config.parity_probe
        self.full_push_due = True
        self.recoveries += 1

    def _push_watching(self) -> bool:
        """Main process: pushes; False when a server stopped answering or is another process now."""
        return self._watching(lambda: self._push() or True) is not None

    def _watching(self, call: Callable[[], Any]) -> Any:
        """`call()`, or None when a server stopped answering during it or restarted since the last checks."""
        try:
            result = call()
        except Exception as exc:
            why = server_restarts.recovery_reason(exc)
            if why is None:
                raise
            server_restarts.log_recovery(why, self.client.addresses, self.rollout_config)
            return None
        restarted = self.watch.restarted()
        if restarted:
            server_restarts.log_recovery("a server restarted", restarted, self.rollout_config)
            return None
        return result

    def _gather_only(self) -> None:
        if self._adapter_pushes:  # nothing sharded to gather
            return
        for _ in self._iter_named_params():  # the gathers are collectives
            pass

    @property
    def _adapter_pushes(self) -> bool:
        sharded = self._dist.is_zero3 or self._dist.is_fsdp
        return adapter_pushes.uses_adapter_pushes(self.model, self.rollout_config.adapter_pushes, sharded)

    def _push(self) -> None:
        lora = None
        if self._adapter_pushes:
            named, lora = adapter_pushes.adapter_push(self.model, self.full_push_due, self.server_dtype)
        else:
            named = [(name, self._detached(tensor)) for name, tensor in self._iter_named_params()]
            named = push_dtype.cast(named, self.server_dtype)
        version = self._next_version()
        if self.watch.restarted():  # met a new process: recover first (the caller sees it), then push
            return
        try:
            version = self.client.update_weights(
                named,
                transport=self.rollout_config.transport,
                version=version,
                in_flight=self.rollout_config.in_flight,
                lora=lora,
                **self.rollout_config.transport_options,
            )
        except (ValueError, WeightSyncError) as exc:
            mismatch = server_checks.as_model_mismatch(exc, self.rollout_config.addresses)
            if mismatch is None:
                raise
            raise mismatch from exc
        self.full_push_due = False
        self.pushed_version = int(version)
        self.pushed_versions.append(self.pushed_version)
        self.served_versions = self._server_versions()

    def _next_version(self) -> int:
        """Above every version this run pushed and every server's now: one number never names two
        weight sets (a restarted server counts from 0 again; another writer may be ahead of us)."""
        return max([self.pushed_version or 0, *self._server_versions().values()]) + 1

    def _probe_parity(self, samples: list[parity_probe.ProbeSample], where: str) -> None:
        """Every process scores the main process's samples (a sharded model's forward is a collective)."""
        precision = parity_probe.Precision.of(self.model, self.accelerator, self.server_dtype)
        limit = precision.tolerance(self.rollout_config.parity_tolerance)
        mean, worst = parity_probe.compare(self.model, samples, limit, where, precision)
        logger.info(
            "rollout parity probe %s: mean |logp diff| %.2e, max %.2e (limit %.2e, %s)",
            where,
            mean,
            worst,
            limit,
            precision,
        )

    def _probe_samples(self) -> list[parity_probe.ProbeSample]:
        count = max(len(PROBE_TEXTS), len(self.client.addresses))  # every server gets one
        fits = max(1, self.context_length - parity_probe.PROBE_TOKENS)  # a short-context server still fits
        prompts = probe_prompts(self.processing_class, self.accelerator.unwrap_model(self.model), count, fits)
        outputs = self.client.generate(prompts.requests, parity_probe.probe_params())
        return parity_probe.probe_samples(prompts, [output.outputs for output in outputs])

    def _detached(self, tensor: torch.Tensor) -> torch.Tensor:
        # Merged PEFT values and gathered shards only live inside TRL's iterator: keep a copy.
        must_copy = is_peft_model(self.model) or self._dist.is_zero3 or self._dist.is_fsdp
        return tensor.detach().clone() if must_copy else tensor.detach()

    def _servers_changed(self) -> bool:
        """Main process: True when a server no longer serves the version this trainer pushed
        (another writer), restarted, or stopped answering; waits up to wait_timeout for a server first."""
        if self.pushed_version is None:
            return False
        server_checks.wait_ready(self.client, self.rollout_config)  # a server gone for good ends here
        versions = self._watching(self._server_versions)
        return versions is None or versions != self.served_versions

    def _server_versions(self) -> dict[str, int]:
        return {address: self.client.server_info(address).weight_version for address in self.client.addresses}

    # -- generation -----------------------------------------------------------------------------

    def generate(
        self,
        prompts: list[list[int]],
        images: list | None,
        num_generations: int,
        profiler: AbstractContextManager | None = None,
    ) -> tuple[list[list[int]], list[list[int]], list[list[list[float]]], None]:
        """Same contract as VLLMGeneration.generate: this process's slice, samples of a prompt consecutive."""
        all_prompts = gather_object(prompts)
        unique_prompts = [list(ids) for ids in all_prompts[::num_generations]]
        if has_images(images):  # the VLM path: ids with their images (image_prompts.py), never ahead
            unique_prompts = with_images(unique_prompts, gather_object(images), num_generations)
        rounds = self.async_rounds if self.model.training and not has_images(images) else None
        batch = rounds.take(unique_prompts, num_generations) if rounds is not None else None
        if batch is None:
            batch = self._generate_fresh(unique_prompts, num_generations, profiler)
        if rounds is not None:
            rounds.submit_next(num_generations)  # round t+1 generates while the trainer trains on this one
        prompt_ids = [ids for ids in batch.prompt_ids for _ in range(num_generations)]
        start = self.accelerator.process_index * len(prompts)
        local = slice(start, start + len(prompts))
        logprobs = [[[lp] for lp in seq] for seq in batch.logprobs[local]]  # vLLM's [token][top-k] layout
        return prompt_ids[local], batch.completion_ids[local], logprobs, None

    def _generate_fresh(
        self, unique_prompts: list[list[int]], n: int, profiler: AbstractContextManager | None
    ) -> RolloutBatch:
        """Generates with the pushed weights. A server that restarted or stopped answering before or
        during the round is waited for, checked, pushed to and probed again, and the round generated
        again; a server that serves other weights without restarting gets ours once more."""
        recoveries = stale = 0
        while True:
            is_main = self.accelerator.is_main_process
            batch = self._broadcast(self._watched_round(unique_prompts, n, profiler) if is_main else None)
            if batch is None:
                recoveries += 1
                if recoveries > MAX_RECOVERIES:
                    raise server_checks.RolloutServerUnavailable(
                        f"the rollout servers at {', '.join(self.rollout_config.addresses)} restarted "
                        f"{recoveries} times in a row during one round; training stops"
                    )
                self._recover()
                self.sync_weights()
            elif not batch.stale:
                return batch
            elif stale == 1:
                raise StaleWeightsError(
                    f"the rollout server generated with weight versions {sorted(set(batch.versions))}, not the "
                    f"pushed version, twice in a row; is another trainer pushing to "
                    f"{', '.join(self.rollout_config.addresses)}?"
                )
            else:
                stale += 1
                self.probe_due = self.rollout_config.parity_probe
                self.full_push_due = True
                self.sync_weights()

    def _watched_round(
        self, unique_prompts: list[list[int]], n: int, profiler: AbstractContextManager | None
    ) -> RolloutBatch | None:
        """Main process: the round, or None when a server restarted or went away before or during it."""
        if self._servers_changed():
            return None
        return self._watching(lambda: self._request(unique_prompts, n, profiler))

    def _request(
        self, unique_prompts: list[list[int]], n: int, profiler: AbstractContextManager | None
    ) -> RolloutBatch:
        with profiler or nullcontext():
            outputs = self.client.generate(unique_prompts, self.sampling_params(n))
        accepted = set(self.served_versions.values()) if self.pushed_version is not None else None
        return RolloutBatch.of(outputs, n, accepted, self.policy.sampling_logprobs)

    def _broadcast(self, obj: Any) -> Any:
        holder = [obj]
        broadcast_object_list(holder, from_process=0)
        return holder[0]
