"""Output objects shared by the offline LLM, the gRPC client and the CLI; PartialSample is one brought back to resume."""

from __future__ import annotations

from dataclasses import dataclass, field

from rollout.logprobs import SampleLogprobs

FINISH_REASONS = ("stop", "length", "abort")


@dataclass(slots=True)
class CompletionOutput:
    """One sample: its tokens, their logprobs, why it stopped and the weights that made it.

    `weight_versions` and `kv_versions` are spans `[(first output token index, version), ...]`:
    the version that sampled each token, and the oldest weight version among the KV entries that
    token attended to (older than the first only after an in-flight update with policy "keep").
    `weight_version` is the oldest version that sampled any token (the request's version at
    admission when there is none): the whole sample's version when only one made it.
    """

    index: int
    token_ids: list[int]
    # Per token: the sampled token's value (what RL code trains on: `torch.tensor(out.token_logprobs)`), a float
    # that is also vLLM's Logprob (.logprob, .rank, .decoded_token; rollout/logprobs.py) when the engine made it
    # (a plain float from a server that predates ranks). `logprobs` is vLLM's shape of the same values.
    token_logprobs: list[float] | None
    # Per token with logprobs=k > 0: the top k (rank order), plus the sampled token when it is not among them.
    top_logprobs: list[dict[int, float]] | None
    finish_reason: str
    weight_version: int
    text: str | None = None
    weight_versions: list[tuple[int, int]] = field(default_factory=list)
    kv_versions: list[tuple[int, int]] = field(default_factory=list)
    # Per token (with logprobs): log of the probability mass top-k/top-p/min-p kept; processed
    # logprob + kept_log_mass = the untruncated temperature-scaled logprob (engine/sample/truncation_mass.py).
    kept_log_mass: list[float] | None = None
    # Per token with SamplingParams(return_kept_tokens=True): the ids the filters kept, ascending.
    kept_token_ids: list[list[int]] | None = None
    # vLLM's fields: what stopped a "stop" sample (the stop string, or the stop_token_ids entry; None
    # for EOS or any other finish), and the sum of the returned logprobs (None without logprobs).
    stop_reason: int | str | None = None
    cumulative_logprob: float | None = None
    # The logprobs mode the request ran with (vLLM's names: "processed_logprobs", "raw_logprobs", "raw_logits",
    # "processed_logits"): what logprobs, top_logprobs and cumulative_logprob hold. None: not known (from a
    # server that predates it).
    logprobs_mode: str | None = None

    @property
    def logprobs(self) -> SampleLogprobs | None:
        """vLLM's `CompletionOutput.logprobs`: per token `{token_id: Logprob}`, the sampled token first, then the
        top k (k or k + 1 entries), so `logprobs[i][token].logprob / .rank / .decoded_token` and
        `next(iter(logprobs[i].values()))` run as in vLLM; None without logprobs. A view over `token_logprobs`
        and `top_logprobs` (each entry built when read)."""
        if self.token_logprobs is None:
            return None
        return SampleLogprobs(self.token_ids, self.token_logprobs, self.top_logprobs)


@dataclass(slots=True)
class RequestOutput:
    """A prompt's samples.

    From `LLM.generate` and `RolloutClient.generate`, `outputs` holds all n samples in index order
    and `finished` is True. From `LLMEngine.step`, `outputs` holds only the samples that finished in
    that step (a delta) and `finished` says whether the whole request is done.
    """

    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = False
    prompt: str | None = None
    # With SamplingParams(prompt_logprobs=k): one entry per prompt token, the first None, each the
    # token's logprob given the tokens before it plus the top k (vLLM's shape; engine/output/prompt_logprobs.py).
    prompt_logprobs: list[dict[int, float] | None] | None = None
    # Prompt tokens the engine found in its prefix cache when it first scheduled the prompt (vLLM's
    # `RequestOutput.num_cached_tokens`; OpenAI's `usage.prompt_tokens_details.cached_tokens`).
    num_cached_tokens: int | None = None

    @property
    def logprobs_mode(self) -> str | None:
        """The request's logprobs mode (its samples'): logits under "*_logits" for prompt logprobs too."""
        return self.outputs[0].logprobs_mode if self.outputs else None


@dataclass(frozen=True, slots=True)
class PartialSample:
    """What a partial sample brings back: its index (its seeded stream), tokens, logprobs and spans."""

    index: int
    token_ids: list[int]
    logprobs: list[float] | None = None
    top_logprobs: list[dict[int, float]] | None = None
    weight_versions: list[tuple[int, int]] = field(default_factory=list)
    kv_versions: list[tuple[int, int]] = field(default_factory=list)
    # One per token when the resumed request asks for logprobs / return_kept_tokens (truncation_mass.py).
    kept_log_mass: list[float] | None = None
    kept_token_ids: list[list[int]] | None = None

    @classmethod
    def of(cls, sample: CompletionOutput) -> PartialSample:
        return cls(
            sample.index,
            list(sample.token_ids),
            sample.token_logprobs,
            sample.top_logprobs,
            list(sample.weight_versions),
            list(sample.kv_versions),
            sample.kept_log_mass,
            sample.kept_token_ids,
        )
