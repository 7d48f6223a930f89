"""`rollout bench`: GRPO-shaped throughput of rollout's engine, side by side with transformers.

The command itself, `rollout bench`, is command.py: it parses before it imports the benchmark.
"""
