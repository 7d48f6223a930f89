"""Hybrid recurrent state: the state pool beside the KV cache and the recurrent layers that read it."""
