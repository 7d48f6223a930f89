"""`rollout demo`: GRPO on the embedded default model against a real rollout server, in minutes on a CPU."""

from rollout.demo.main import main

__all__ = ["main"]
