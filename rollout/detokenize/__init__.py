"""Text out of sampled tokens, as vLLM makes it: incremental detokenization and stop strings.

incremental.py (one sample's text as tokens arrive, the prompt as context), stop_strings.py (vLLM's
match rule), sample_text.py (both together: where a sample's text ends and which token completed a
stop string), finish_text.py (a finished sample's text, stop string and tokens, from its token ids),
tokenizer_lock.py (the one lock every thread that runs the shared tokenizer takes).
"""
