"""Which values `logprobs` carry: vLLM's four logprobs modes, with rollout's two older names as aliases.

"raw_*": the model's logits as the sampler receives them (with a structured output's grammar mask, as vLLM's
model runner applies it before its sampler); "processed_*": after every processor the token was drawn
with (logit_bias, penalties, bans, the grammar, temperature, min-p / top-k / top-p; greedy rows skip the
temperature and the filters, as vLLM's). "*_logprobs": their fp32 log-softmax; "*_logits": the values
themselves. Prompt logprobs go through no processor, so "processed_*" equals "raw_*" there (vLLM too).
vLLM's default is "raw_logprobs"; rollout's is "processed_logprobs" (what an importance-sampling ratio needs).
"""

from __future__ import annotations

LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits")
LOGPROBS_MODE_ALIASES = {"processed": "processed_logprobs", "raw": "raw_logprobs"}  # rollout's first names
DEFAULT_LOGPROBS_MODE = "processed_logprobs"


def canonical_mode(mode: object, field: str = "logprobs_mode") -> str:
    """vLLM's name of `mode` (an alias becomes it); ValueError naming `field` for anything else."""
    if isinstance(mode, str) and mode in LOGPROBS_MODES:
        return mode
    if isinstance(mode, str) and mode in LOGPROBS_MODE_ALIASES:
        return LOGPROBS_MODE_ALIASES[mode]
    names = ", ".join(LOGPROBS_MODES)
    raise ValueError(f"{field} must be one of {names} (or 'processed' / 'raw'), got {mode!r}")


def is_raw(mode: str) -> bool:
    return mode.startswith("raw_")


def is_logits(mode: str) -> bool:
    return mode.endswith("_logits")
