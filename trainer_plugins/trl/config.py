"""RolloutConfig: where the rollout server is and how the trainer pushes weights to it.

Kept apart from TRL's `GRPOConfig` so that a GRPO script keeps its config untouched and only
says where generation happens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollout.config import EngineConfig

TRANSPORTS = ("grpc", "distributed", "disk")
IN_FLIGHT_POLICIES = ("wait", "abort", "keep", "recompute")
TRAINED_POLICIES = ("processed", "unprocessed")


@dataclass(frozen=True)
class RolloutConfig:
    """Connection and weight-sync settings of `RolloutGRPOTrainer`.

    `server`: one "host:port" or a list of them (every server gets every weight update).
    `token`: bearer token (`rollout serve --token`). `tls`: None plaintext, True TLS with the system
    roots, or the path of a PEM root certificate to trust (`rollout serve --tls-cert/--tls-key`).
    `transport`: how weights travel ("grpc" works anywhere; "distributed" needs a reachable
    torch.distributed rendezvous; "disk" a directory both sides can read).
    `transport_options`: extra keyword arguments for `RolloutClient.update_weights`
    (for example the directory of the "disk" transport).
    `wait_timeout`: seconds to wait, with one deadline for all servers, until every server's health
    check says SERVING: at start-up, before every round once weights were pushed (a server that went
    away is waited for there), and before the start-up checks are run again in a recovery (after a
    restart, a server that stopped answering, or an adapter push refused for another base; a server the
    client had given up on gets prompts again once the wait finds it serving). Not ready by then:
    `RolloutServerUnavailable`, and training stops.
    `check_vocabulary`: tokenize a probe string on the server and refuse another tokenizer.
    `parity_probe`: after the first push (and after a server restart), score a few server samples
    with the trainer's model and refuse to train when the logprobs differ beyond numerical noise.
    `parity_tolerance`: that limit, mean |difference| per token in nats; None: by the dtypes
    involved (parity_probe.TOLERANCE_BY_DTYPE).
    `trained_policy`: the policy TRL's loss and importance-sampling ratio compute logprobs of.
    "processed": the distribution the server samples from, every sampling setting (penalties, bans,
    logit_bias, grammars, top-k/top-p/min-p, temperature) replayed on the trainer's logits, so the
    ratio measures only the engine-vs-trainer difference; a setting that cannot be replayed exactly
    is refused at start-up. "unprocessed": TRL's own temperature-scaled policy over the whole
    vocabulary; the ratio is then the true off-policy ratio to the sampling distribution
    (trained_policy.py).
    `untruncated_logprobs`: with trained_policy="unprocessed", hand TRL, per sampled token, the
    server's processed logprob plus the log of the probability mass top-k/top-p/min-p kept (the
    untruncated temperature-scaled logprob its correction recomputes); False hands it the
    renormalised one. The processed policy replays the filters instead.
    `in_flight`: what the servers do with requests still generating when a push commits ("wait",
    "abort", "keep", "recompute": rollout/engine/versions/in_flight.py). Only the async mode has any.
    `async_generation`: generate round t+1 on the servers while the trainer trains on round t
    (async_rounds.py); TRL's importance-sampling correction then corrects the lag with the servers'
    per-token behaviour logprobs. `max_lag`: how many pushes a trained round's oldest token may be
    behind the trainer's weights (1: the round generated during the previous step); an older round
    is never trained on, it is generated again.
    `adapter_pushes`: with a PEFT LoRA policy, push only the adapter each step (the base weights
    with it on the first push and after a server restart); False pushes the merged weights every
    step (adapter_pushes.py).
    `engine`: with GRPOConfig(vllm_mode="colocate"), the in-process engine's settings (None: from GRPOConfig's
    vllm_gpu_memory_utilization and vllm_max_model_length); its seed is offset by the process index.
    """

    server: str | list[str] = "127.0.0.1:50051"
    token: str | None = None
    tls: bool | str | None = None
    transport: str = "grpc"
    transport_options: dict[str, Any] = field(default_factory=dict)
    wait_timeout: float = 240.0
    check_vocabulary: bool = True
    parity_probe: bool = True
    parity_tolerance: float | None = None
    trained_policy: str = "processed"
    untruncated_logprobs: bool = True
    in_flight: str = "wait"
    async_generation: bool = False
    max_lag: int = 1
    adapter_pushes: bool = True
    engine: EngineConfig | None = None

    def __post_init__(self) -> None:
        servers = [self.server] if isinstance(self.server, str) else list(self.server)
        if not servers or not all(isinstance(s, str) and s for s in servers):
            raise ValueError(f"server must be 'host:port' or a non-empty list of them, got {self.server!r}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {self.transport!r}")
        if self.wait_timeout <= 0:
            raise ValueError(f"wait_timeout must be > 0 seconds, got {self.wait_timeout}")
        if self.trained_policy not in TRAINED_POLICIES:
            raise ValueError(f"trained_policy must be one of {TRAINED_POLICIES}, got {self.trained_policy!r}")
        if self.in_flight not in IN_FLIGHT_POLICIES:
            raise ValueError(f"in_flight must be one of {IN_FLIGHT_POLICIES}, got {self.in_flight!r}")
        if self.async_generation and self.in_flight == "abort":
            raise ValueError(
                'in_flight="abort" cuts the round generating during a push short, and TRL would train on '
                'the cut samples as if complete; with async_generation use "wait", "keep" or "recompute"'
            )
        if isinstance(self.max_lag, bool) or not isinstance(self.max_lag, int) or self.max_lag < 1:
            raise ValueError(f"max_lag must be an integer >= 1, got {self.max_lag!r}")
        if self.parity_tolerance is not None and not self.parity_tolerance > 0:
            raise ValueError(f"parity_tolerance must be > 0 nats (or None), got {self.parity_tolerance}")

    @property
    def addresses(self) -> list[str]:
        return [self.server] if isinstance(self.server, str) else list(self.server)
