"""The vLLM text settings a GRPOConfig's generation_kwargs may hold: stop strings and how text is made.

Each maps to the rollout SamplingParams field of the same name and meaning (docs/engine_api.md).
TRL reads only the token ids and logprobs; the text settings still shape where a stop string cuts.
"""

from __future__ import annotations

TEXT_GENERATION_KWARGS = (
    "stop",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "detokenize",
)
