"""EngineConfig: every knob of the engine in one frozen dataclass, validated at construction."""

from __future__ import annotations

from dataclasses import dataclass

from rollout.sampling_params.logprobs_modes import DEFAULT_LOGPROBS_MODE, canonical_mode


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings. `None` means "derive from the model or the machine"."""

    block_size: int = 16
    # KV cache size in blocks; None sizes it from `kv_cache_memory_gb` (CPU) or free GPU memory (CUDA).
    num_blocks: int | None = None
    kv_cache_memory_gb: float | None = None
    gpu_memory_utilization: float = 0.85
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 4096
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    # Hybrid models: recurrent-state snapshots kept for prefix hits (rollout/engine/hybrid/state_snapshots.py),
    # least recently used dropped first; their bytes come out of the KV cache budget (ValueError naming it when
    # they do not fit). None: derived from memory, at most max_num_seqs and at most a quarter of the budget the
    # running sequences' states leave (hybrid/state_budget.py). 0 turns prefix caching off for hybrid models.
    max_state_snapshots: int | None = None
    dtype: str = "auto"  # "auto" | "float32" | "bfloat16" | "float16"
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    attention_backend: str = "auto"  # "auto" | "sdpa" (CPU) | "torch" (the reference) | "triton"
    enforce_eager: bool = False  # CUDA only: False captures CUDA graphs for decode steps
    seed: int = 0
    # Default SamplingParams.max_staleness for requests that leave it unset (None: no bound).
    max_staleness: int | None = None
    # At load, compare the engine's forward with the model's own on a few random sequences; refuse on a mismatch.
    self_check: bool = True
    # Run that check again after each weight update, before it commits; on a mismatch roll it back.
    self_check_updates: bool = False
    # Ranks the model is sharded over (rollout/distributed/): one process per device, rank 0 schedules.
    tensor_parallel_size: int = 1
    # What logprobs carry for requests that leave SamplingParams.logprobs_mode unset (vLLM's `LLM(logprobs_mode=)`,
    # `--logprobs-mode`): "processed_logprobs" (default; vLLM's is "raw_logprobs"), "raw_logprobs", "raw_logits",
    # "processed_logits" (rollout/sampling_params/logprobs_modes.py).
    logprobs_mode: str = DEFAULT_LOGPROBS_MODE

    def __post_init__(self) -> None:
        _positive("block_size", self.block_size)
        _positive("max_num_seqs", self.max_num_seqs)
        _positive("max_num_batched_tokens", self.max_num_batched_tokens)
        _positive("tensor_parallel_size", self.tensor_parallel_size)
        object.__setattr__(self, "logprobs_mode", canonical_mode(self.logprobs_mode))
        if self.num_blocks is not None:
            _positive("num_blocks", self.num_blocks)
        if self.max_state_snapshots is not None and (
            not isinstance(self.max_state_snapshots, int) or self.max_state_snapshots < 0
        ):
            raise ValueError(
                f"max_state_snapshots must be a non-negative integer, got {self.max_state_snapshots!r}"
            )
        if self.max_staleness is not None and (
            not isinstance(self.max_staleness, int) or self.max_staleness < 0
        ):
            raise ValueError(f"max_staleness must be a non-negative integer, got {self.max_staleness!r}")
        if self.max_model_len is not None:
            _positive("max_model_len", self.max_model_len)
        if self.kv_cache_memory_gb is not None and self.kv_cache_memory_gb <= 0:
            raise ValueError(f"kv_cache_memory_gb must be > 0, got {self.kv_cache_memory_gb}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}")
        if self.attention_backend not in ("auto", "sdpa", "torch", "triton"):
            raise ValueError(
                f"attention_backend must be auto, sdpa, torch or triton, got {self.attention_backend!r}"
            )


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
