"""The KV cache: per-layer shapes and block pools (kv_cache.py), and how many blocks fit (kv_sizing.py)."""
