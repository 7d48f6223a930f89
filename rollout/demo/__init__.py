"""`rollout demo`: GRPO on the embedded default model against a real rollout server, in minutes on a CPU.

The command itself, `rollout demo`, is command.py: it parses before it imports the demo.
"""
