"""TRL integration: `RolloutGRPOTrainer` runs GRPO with rollouts from a `rollout` server.

Needs the `trl` extra (`pip install rollout[trl]`); nothing else in the project imports `trl`.
Switching a vLLM server-mode script: replace `GRPOTrainer` with `RolloutGRPOTrainer` and pass
`rollout_config=RolloutConfig(server="host:port")`.
"""

from .config import RolloutConfig
from .generation import RolloutGeneration, StaleWeightsError
from .parity_probe import ParityMismatch
from .rollout_batch import RolloutBatch
from .server_checks import RolloutModelMismatch, RolloutServerUnavailable
from .trainer import RolloutGRPOTrainer

__all__ = [
    "ParityMismatch",
    "RolloutBatch",
    "RolloutConfig",
    "RolloutGRPOTrainer",
    "RolloutGeneration",
    "RolloutModelMismatch",
    "RolloutServerUnavailable",
    "StaleWeightsError",
]
