"""`rollout bench`: GRPO-shaped throughput of rollout's engine, side by side with transformers."""

from rollout.bench.main import main

__all__ = ["main"]
