"""RolloutGRPOTrainer: TRL's GRPOTrainer generating through a rollout server instead of vLLM.

TRL routes weight sync (once per optimizer step, in `_generate_single_turn` and before a
`rollout_func`), sampled-token logprobs and the importance-sampling correction through its
"use_vllm" code paths. This subclass keeps those paths and swaps the backend object they call,
so every GRPOConfig option that is not vLLM-specific behaves exactly as with a vLLM server.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from trl import GRPOConfig, GRPOTrainer

from .async_rounds import AsyncRounds
from .colocate_checks import check_colocate_settings, is_colocate
from .colocate_generation import ColocatedGeneration
from .config import RolloutConfig
from .generation import RolloutGeneration
from .processed_logps import per_token_logps
from .vllm_mode_checks import check_vllm_mode_settings

logger = logging.getLogger(__name__)


class RolloutGRPOTrainer(GRPOTrainer):
    """A `GRPOTrainer` whose rollouts come from a `rollout` server, or from an engine in each training
    process with `GRPOConfig(use_vllm=True, vllm_mode="colocate")` (colocate_generation.py).

    Takes every GRPOTrainer argument plus `rollout_config`. Otherwise `use_vllm`/`vllm_mode` are
    ignored (a vLLM server-mode config works unchanged); the `vllm_importance_sampling_*` options
    apply to rollout's logprobs.
    """

    def __init__(
        self,
        model: Any,
        reward_funcs: Any,
        args: GRPOConfig | None = None,
        *trainer_args: Any,
        rollout_config: RolloutConfig | None = None,
        **trainer_kwargs: Any,
    ) -> None:
        rollout_config = rollout_config or RolloutConfig()
        colocate = is_colocate(args)
        if args is not None:  # before anything is built: an error means nothing changed
            check_vllm_mode_settings(args)
            if colocate:
                check_colocate_settings(args, rollout_config)
        super().__init__(model, reward_funcs, _without_vllm(args), *trainer_args, **trainer_kwargs)
        self.rollout_config = rollout_config
        # TRL's vLLM server-mode paths (weight sync per step, IS correction) now call our backend.
        self.use_vllm = True
        self.vllm_mode = "server"
        self._last_loaded_step = -1
        backend = (
            ColocatedGeneration if colocate else RolloutGeneration
        )  # colocate: an engine in this process
        self.vllm_generation = backend(self, self.rollout_config)
        self.async_rounds = self._async_rounds() if self.rollout_config.async_generation else None
        self.vllm_generation.async_rounds = self.async_rounds

    def _async_rounds(self) -> AsyncRounds | None:
        """The async mode's machinery; refuses the settings under which its lag would go uncorrected.

        None with tools: TRL asks for each tool turn's prompts only once the previous turn's tool
        calls have run, and a round's first turn only after the last turn of the round before, so
        no round can be generated ahead; saying so once beats dropping every prefetched round.
        """
        if not self.args.vllm_importance_sampling_correction:
            raise ValueError(
                "RolloutConfig.async_generation trains on rounds generated with older weights; "
                "GRPOConfig.vllm_importance_sampling_correction must stay True to correct for it"
            )
        if self.accelerator.num_processes > 1:
            raise NotImplementedError("RolloutConfig.async_generation runs with one training process for now")
        if getattr(self, "tools", None):
            logger.warning(
                "RolloutConfig.async_generation has no effect with tools: each turn's prompts exist only once "
                "the previous turn's tool calls ran, so rounds are generated when TRL asks for them"
            )
            return None
        return AsyncRounds(self, self.vllm_generation, self.rollout_config.max_lag)

    def get_train_dataloader(self) -> Any:
        loader = super().get_train_dataloader()
        return loader if self.async_rounds is None else self.async_rounds.wrap(loader)

    def train(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().train(*args, **kwargs)
        finally:
            if self.async_rounds is not None:
                self.async_rounds.close()

    def _get_per_token_logps_and_entropies(
        self, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, **kwargs: Any
    ) -> Any:
        """TRL's own, unless the processed policy is trained and differs from it (trained_policy.py)."""
        policy = getattr(getattr(self, "vllm_generation", None), "policy", None)
        if policy is None or policy.replay is None:
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, **kwargs
            )
        return per_token_logps(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            policy.replay,
            policy.params,
            self.accelerator.autocast,
            **kwargs,
        )

    @property
    def rollout_client(self) -> Any:
        """The RolloutClient (main process only; None elsewhere), e.g. for a custom `rollout_func`."""
        return self.vllm_generation.client


def _without_vllm(args: GRPOConfig | None) -> GRPOConfig | None:
    """A copy of `args` that keeps GRPOTrainer from building its own vLLM backend."""
    if args is None or not args.use_vllm:
        return args
    logger.info("RolloutGRPOTrainer: use_vllm=True ignored; generation goes through the rollout server")
    args = copy.copy(args)
    args.use_vllm = False
    return args
