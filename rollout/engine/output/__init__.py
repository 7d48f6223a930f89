"""What a step hands back: each sample's per-token record (token_record.py), its finish checks (stop_checks.py),
the finished samples as outputs (completion.py), prompt logprobs, and streamed tokens (token_stream.py)."""
