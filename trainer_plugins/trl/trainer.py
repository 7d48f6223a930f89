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

from .config import RolloutConfig
from .generation import RolloutGeneration
from .vllm_mode_checks import check_vllm_mode_settings

logger = logging.getLogger(__name__)


class RolloutGRPOTrainer(GRPOTrainer):
    """A `GRPOTrainer` whose rollouts come from a `rollout` server.

    Takes every GRPOTrainer argument plus `rollout_config`. `use_vllm`/`vllm_mode` in the
    GRPOConfig are ignored (a vLLM server-mode config works unchanged); the
    `vllm_importance_sampling_*` options apply to rollout's logprobs.
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
        if args is not None:
            check_vllm_mode_settings(args)  # before anything is built: an error means nothing changed
        super().__init__(model, reward_funcs, _without_vllm(args), *trainer_args, **trainer_kwargs)
        self.rollout_config = rollout_config or RolloutConfig()
        # TRL's vLLM server-mode paths (weight sync per step, IS correction) now call our backend.
        self.use_vllm = True
        self.vllm_mode = "server"
        self._last_loaded_step = -1
        self.vllm_generation = RolloutGeneration(self, self.rollout_config)

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
