"""TRL's own init-time checks for its vLLM mode, which GRPOTrainer skips because we build it with use_vllm=False.

Mirrors trl 1.16 `GRPOTrainer.__init__`: each check that is gated on `use_vllm` and still applies
to a rollout server is repeated here with TRL's rule. (Its other vLLM-gated check, the server's
`--logprobs-mode`, holds by construction: the plugin always asks for processed logprobs.)
"""

from __future__ import annotations

from trl import GRPOConfig

VESPO_IS_MODES = ("token_truncate", "token_mask")


def check_vllm_mode_settings(args: GRPOConfig) -> None:
    """Raises ValueError naming the GRPOConfig field, as TRL does with use_vllm=True."""
    vespo_corrected = args.loss_type == "vespo" and args.vllm_importance_sampling_correction
    if vespo_corrected and args.vllm_importance_sampling_mode not in VESPO_IS_MODES:
        raise ValueError(
            f"VESPO loss requires `vllm_importance_sampling_mode` to be one of {VESPO_IS_MODES} "
            f"(TRL's rule for vLLM-backed generation), got {args.vllm_importance_sampling_mode!r}; or set "
            "`vllm_importance_sampling_correction=False`."
        )
