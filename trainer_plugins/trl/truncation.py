"""With trained_policy="unprocessed": which sampling logprobs TRL's importance-sampling correction gets
when top-k/top-p/min-p truncate (trained_policy.py; the processed policy replays the filters instead).

TRL recomputes each sampled token's logprob over the full vocabulary at the sampling temperature
and divides by the sampler's. The server's "processed" logprobs are renormalised over the kept
tokens, so the ratio would carry the kept probability mass S (down to ~1e-9 over a sequence on a
flat distribution) instead of the engine-vs-trainer mismatch it exists to correct (TRL #6789). The
plugin hands TRL processed + log S, the untruncated temperature-scaled logprob, so the ratio
compares like with like; truncation itself is treated as part of the sampling policy, not as
off-policy drift.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from rollout.outputs import CompletionOutput

from .config import RolloutConfig

logger = logging.getLogger(__name__)


@dataclass
class TruncationCorrection:
    truncates: bool  # top-k, top-p or min-p cut the sampling distribution
    corrected: bool  # TRL's importance-sampling correction consumes the sampling logprobs
    untruncated: bool  # RolloutConfig.untruncated_logprobs
    warned_missing: bool = False

    @classmethod
    def of(cls, trainer: Any, config: RolloutConfig) -> TruncationCorrection:
        truncates = bool(trainer.top_k) or (trainer.top_p or 1.0) < 1.0 or bool(trainer.min_p)
        corrected = bool(trainer.args.vllm_importance_sampling_correction)
        self = cls(truncates, corrected, config.untruncated_logprobs)
        if truncates and corrected and not self.untruncated:
            logger.warning(
                "rollout: top_k/top_p/min_p truncate sampling and vllm_importance_sampling_correction is on, but "
                "RolloutConfig.untruncated_logprobs=False hands TRL logprobs renormalised over the kept tokens: "
                "every importance-sampling ratio is scaled by the kept probability mass (TRL issue #6789)."
            )
        return self

    def sampling_logprobs(self, sample: CompletionOutput) -> list[float]:
        """Per token, the logprob TRL's correction compares its own recomputation with."""
        if not self.untruncated:
            return list(sample.token_logprobs)
        if sample.kept_log_mass is None:
            self._warn_missing()
            return list(sample.token_logprobs)
        return [lp + mass for lp, mass in zip(sample.token_logprobs, sample.kept_log_mass, strict=True)]

    def _warn_missing(self) -> None:
        if self.truncates and self.corrected and not self.warned_missing:
            self.warned_missing = True
            logger.warning(
                "rollout: the server returns no kept_log_mass (an older rollout version), so with top_k/top_p/min_p "
                "the importance-sampling ratio is scaled by the kept probability mass; upgrade the server."
            )
