"""Model admission: loading, the load-time guard and self-check, derived positions, self-checked updates."""
