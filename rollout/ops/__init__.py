"""Attention and KV-cache kernels: a torch reference (CPU, oracle) and Triton kernels (CUDA)."""
