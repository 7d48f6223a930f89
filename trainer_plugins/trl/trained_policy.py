"""Which policy TRL trains: what its loss and its importance-sampling ratio compute the logprobs of.

"processed" (RolloutConfig.trained_policy, the default): the distribution the server draws each token
from. Where the sampling settings make it differ from TRL's own (temperature only, whole vocabulary),
the plugin replays the server's sampling step on the trainer's logits (rollout.replay.SamplerReplay:
penalties, bans, logit_bias, grammars, top-k/top-p/min-p, temperature) in place of TRL's log-softmax
(processed_logps.py), and hands TRL the server's processed logprobs: the ratio measures only the
engine-vs-trainer difference, and the loss's gradient is that of the policy the samples came from.
"unprocessed": TRL's own logprobs, against the server's processed ones (plus the kept mass under
untruncated_logprobs: truncation.py): the ratio is the true off-policy ratio, far from 1 when the
settings reshape the distribution (with TRL's masking modes, such sequences drop out of the loss).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from rollout.outputs import CompletionOutput
from rollout.replay import SamplerReplay
from rollout.sampling_params import SamplingParams

from .config import RolloutConfig
from .generation_kwargs import reshaping_kwargs
from .truncation import TruncationCorrection

logger = logging.getLogger(__name__)

# With tools, a completion holds tool results the server read as prompt, not as output: the settings that
# read a completion's own output (its length, its tokens, its grammar state) cannot be replayed over it,
# and allowed_token_ids would forbid the tool results' tokens.
NOT_WITH_TOOLS = (
    "min_tokens",
    "presence_penalty",
    "frequency_penalty",
    "bad_words",
    "structured_outputs",
    "allowed_token_ids",
)


@dataclass
class TrainedPolicy:
    processed: bool
    truncation: TruncationCorrection | None  # "unprocessed": which sampling logprobs TRL gets
    replay: SamplerReplay | None = (
        None  # "processed", once started, when the settings reshape the distribution
    )
    params: SamplingParams | None = None  # the settings the replay applies (as sent to the servers)

    @classmethod
    def of(cls, trainer: Any, config: RolloutConfig) -> TrainedPolicy:
        """Refuses, before anything is built, what cannot be replayed exactly (naming it)."""
        reshaping = _reshaping(trainer)
        if config.trained_policy == "unprocessed":
            if reshaping:
                logger.info(
                    "rollout: trained_policy='unprocessed': TRL trains its temperature-only policy while the server "
                    "samples with %s; the importance-sampling ratio is the true off-policy ratio between them",
                    reshaping,
                )
            return cls(False, TruncationCorrection.of(trainer, config))
        refused = [key for key in NOT_WITH_TOOLS if key in reshaping]
        if getattr(trainer, "tools", None) and refused:
            raise ValueError(
                f"generation_kwargs {refused} cannot be replayed on the trainer with tools: a completion then holds "
                "tool results the server read as prompt, which these settings would count as output (or forbid); "
                "drop them, or set RolloutConfig(trained_policy='unprocessed') to train TRL's temperature-only "
                "policy with the true off-policy ratio"
            )
        return cls(True, None)

    def start(
        self, params: SamplingParams, eos_token_ids: tuple[int, ...], vocab_size: int, tokenizer: Any
    ) -> None:
        """Every process, once the servers' facts are known: the replay, when the processed distribution
        is not TRL's own. Compiling a grammar here refuses one the trainer cannot build, naming it."""
        if not self.processed or self.replay is not None or not reshapes(params):
            return
        replay = SamplerReplay(vocab_size, eos_token_ids, tokenizer)
        self.params = replay.prepare(params)
        self.replay = replay

    def sampling_logprobs(self, sample: CompletionOutput) -> list[float]:
        """Per token, the logprob TRL's correction compares its own with."""
        if self.processed:
            return list(sample.token_logprobs)
        return self.truncation.sampling_logprobs(sample)


def reshapes(params: SamplingParams) -> bool:
    """Whether the processed distribution differs from TRL's temperature-scaled whole-vocabulary softmax."""
    return bool(
        params.greedy  # processed logprobs skip the temperature; TRL's divide by it
        or (params.top_k and not params.greedy)
        or (params.top_p < 1.0 and not params.greedy)
        or (params.min_p and not params.greedy)
        or params.repetition_penalty != 1.0
        or params.processes_logits
        or params.structured_outputs is not None
    )


def _reshaping(trainer: Any) -> list[str]:
    """The settings, by their GRPOConfig names, that make the processed distribution differ from TRL's."""
    args = trainer.args
    names = [name for name in ("top_k", "min_p") if getattr(trainer, name, None)]
    if (trainer.top_p or 1.0) < 1.0:
        names.append("top_p")
    if trainer.repetition_penalty != 1.0:
        names.append("repetition_penalty")
    names += reshaping_kwargs(args.generation_kwargs)
    if args.vllm_structured_outputs_regex is not None:
        names.append("structured_outputs")
    return names
