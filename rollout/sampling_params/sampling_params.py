"""SamplingParams: how to sample one request's N completions, validated field by field."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from rollout.sampling_params.field_checks import check_finite, check_int, check_unicode
from rollout.sampling_params.logits_settings import check_logits_settings, has_logits_processors
from rollout.sampling_params.logprobs_modes import canonical_mode
from rollout.structured_outputs.structured_outputs import StructuredOutputsParams, structured_outputs_from

# Temperatures below this sample greedily: dividing fp32 logits by them overflows or underflows.
GREEDY_TEMPERATURE = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings, vLLM-shaped.

    `top_k`: 0 (or -1, as in vLLM) is off. `logprobs`: None returns no logprobs, 0 the sampled token's logprob, k > 0 also the top-k
    alternatives and, as in vLLM, the sampled token when it is not among them (k + 1 entries). `logprobs_mode`: vLLM's
    "raw_logprobs" | "processed_logprobs" | "raw_logits" | "processed_logits" ("processed" and "raw" are aliases of the
    *_logprobs ones; rollout/sampling_params/logprobs_modes.py); None: the engine's (`EngineConfig.logprobs_mode`,
    default "processed_logprobs", the distribution the token was drawn from).

    Extreme values stay exact or take their limit, never NaN: a temperature below
    `GREEDY_TEMPERATURE` (1e-5, vLLM's threshold) samples greedily, as its limit does; a top_p too
    small for fp32 keeps only the top token; a repetition penalty whose result overflows fp32 is
    clamped to the largest finite logit.
    """

    n: int = 1
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    logprobs: int | None = None
    logprobs_mode: str | None = None
    # Versions a sample's KV may fall behind the weights before its update's in-flight policy
    # applies to it (None: the server's default; rollout/engine/versions/in_flight.py).
    max_staleness: int | None = None
    return_kept_tokens: bool = (
        False  # per token, the ids top-k/top-p/min-p kept (engine/sample/truncation_mass.py)
    )
    # Text (rollout/detokenize/): strings that end a sample when its text contains one (a str or a
    # list of them; vLLM's matching and trimming); the stop string kept in `text` or cut off; how
    # special tokens are written; detokenize=False: no text at all (faster; no stop strings then).
    stop: tuple[str, ...] = field(default_factory=tuple)
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    detokenize: bool = True
    # Logits processors, vLLM's names and meanings (rollout/sampling_params/logits_settings.py checks them;
    # rollout/engine/sample/logits_processors.py applies them).
    min_tokens: int = 0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: tuple[int, ...] | None = None
    bad_words: tuple[str, ...] = field(default_factory=tuple)  # tokenized by the front end (bad_words.py)
    bad_words_token_ids: tuple[tuple[int, ...], ...] = field(default_factory=tuple)
    # Per prompt token, its logprob and the top-k (RequestOutput.prompt_logprobs); None: none.
    prompt_logprobs: int | None = None
    # The text must follow a JSON schema, regex, choice or grammar (vLLM's StructuredOutputsParams, or
    # a dict of its fields); the grammar's mask enters the processed distribution (docs/structured_outputs.md).
    structured_outputs: StructuredOutputsParams | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        object.__setattr__(self, "stop", _stop_strings(self.stop))
        if type(self.top_k) is int and self.top_k == -1:  # vLLM's spelling of "off"
            object.__setattr__(self, "top_k", 0)
        check_int("n", self.n, minimum=1)
        check_int("max_tokens", self.max_tokens, minimum=1)
        check_int("top_k", self.top_k, minimum=-1)  # -1 was turned into 0 above
        check_finite("temperature", self.temperature)
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 means greedy), got {self.temperature}")
        check_finite("top_p", self.top_p)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        check_finite("min_p", self.min_p)
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        check_finite("repetition_penalty", self.repetition_penalty)
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.seed is not None:
            check_int("seed", self.seed, minimum=0)
        for token_id in self.stop_token_ids:
            check_int("stop_token_ids", token_id, minimum=0)
        if self.logprobs is not None:
            check_int("logprobs", self.logprobs, minimum=0)
        if self.max_staleness is not None:
            check_int("max_staleness", self.max_staleness, minimum=0)
        if not isinstance(self.return_kept_tokens, bool):
            raise ValueError(f"return_kept_tokens must be a bool, got {self.return_kept_tokens!r}")
        for name in (
            "include_stop_str_in_output",
            "skip_special_tokens",
            "spaces_between_special_tokens",
            "detokenize",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.stop and not self.detokenize:
            raise ValueError("stop: stop strings are matched on the text, so they need detokenize=True")
        if self.logprobs_mode is not None:
            object.__setattr__(self, "logprobs_mode", canonical_mode(self.logprobs_mode))
        check_logits_settings(self)
        object.__setattr__(self, "structured_outputs", structured_outputs_from(self.structured_outputs))

    def __hash__(self) -> int:
        """Hashable although logit_bias is a dict (vLLM's type): clients group prompts by their params."""
        values = [getattr(self, f.name) for f in fields(self)]
        return hash(tuple(tuple(sorted(v.items())) if isinstance(v, dict) else v for v in values))

    @property
    def processes_logits(self) -> bool:
        """Whether a logits processor beyond repetition penalty applies (rows without one skip them all)."""
        return has_logits_processors(self)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE


def params_or_sampling_params(params: Any, sampling_params: Any) -> Any:
    """`params`, or `sampling_params` (vLLM's name for the same argument); both at once is ambiguous."""
    if params is not None and sampling_params is not None:
        raise ValueError("sampling_params: give params or sampling_params (vLLM's name), not both")
    return sampling_params if params is None else params


def _stop_strings(stop: object) -> tuple[str, ...]:
    """vLLM's `stop`: one string or a list of them; an empty string would match everywhere, so it is refused."""
    values = (stop,) if isinstance(stop, str) else stop
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"stop must be a string or a list of strings, got {stop!r}")
    for value in values:
        if not isinstance(value, str):
            raise ValueError(f"stop must hold strings, got {value!r}")
        if not value:
            raise ValueError("stop: an empty stop string would match before any text; remove it")
        check_unicode("stop", value)  # decoded text never holds a lone surrogate: it could never match
    return tuple(values)
