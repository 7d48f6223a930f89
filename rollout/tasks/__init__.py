"""Synthetic tasks with verifiable rewards, shared by the default model's training, the demo and examples."""
