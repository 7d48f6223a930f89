"""The logits-processor keys of TRL's generation_kwargs (vLLM SamplingParams names) and what they become.

Each maps to the rollout field of the same name and meaning; logit_bias keys that a JSON or YAML
config turned into strings are read back as the token ids they are. Keys TRL never consumes the
result of are refused with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)

LOGITS_PROCESSOR_KWARGS = (
    "min_tokens",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "allowed_token_ids",
    "bad_words",
    "structured_outputs",  # a dict of StructuredOutputsParams' fields, or vLLM's own object
)
REFUSED_WHY = {
    "prompt_logprobs": "TRL's generation reads no prompt logprobs; score sequences with RolloutClient.score",
}


def logits_processor_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """`kwargs` with logit_bias keyed by int token ids (ValueError naming logit_bias otherwise)."""
    out = dict(kwargs)
    bias = out.get("logit_bias")
    if isinstance(bias, Mapping):
        try:
            out["logit_bias"] = {int(token): value for token, value in bias.items()}
        except ValueError:
            raise ValueError(
                f"generation_kwargs logit_bias: keys must be token ids, got {list(bias)}"
            ) from None
    if isinstance(out.get("bad_words"), list):
        out["bad_words"] = tuple(out["bad_words"])
    if out.get("structured_outputs") is not None:
        out["structured_outputs"] = structured_outputs_dict(out["structured_outputs"])
    return out


def structured_outputs_dict(value: Any) -> Any:
    """vLLM's StructuredOutputsParams object -> the dict of the fields rollout has (a dict passes as is;
    SamplingParams refuses unknown keys by name)."""
    if isinstance(value, Mapping):
        return dict(value)
    names = ("json", "regex", "choice", "grammar", "json_object", "disable_any_whitespace")
    return {name: getattr(value, name) for name in names if getattr(value, name, None) not in (None, False)}


def with_trl_regex(kwargs: dict[str, Any], regex: str | None) -> dict[str, Any]:
    """GRPOConfig.vllm_structured_outputs_regex, as TRL's vLLM path sends it: it takes precedence over
    generation_kwargs' structured_outputs (TRL warns the same way)."""
    if regex is None:
        return kwargs
    if kwargs.get("structured_outputs") is not None:
        logger.warning(
            "rollout: both vllm_structured_outputs_regex and generation_kwargs['structured_outputs'] are set; "
            "vllm_structured_outputs_regex takes precedence (as in TRL)."
        )
    return {**kwargs, "structured_outputs": {"regex": regex}}


def reshaping_kwargs(kwargs: Mapping[str, Any] | None) -> list[str]:
    """The processor keys set to something that changes the sampling distribution."""
    return [
        key for key in LOGITS_PROCESSOR_KWARGS if (kwargs or {}).get(key) not in (None, 0, 0.0, [], {}, ())
    ]


def refusal_reasons(keys: list[str]) -> str:
    return "".join(f"; {key}: {REFUSED_WHY[key]}" for key in keys if key in REFUSED_WHY)
