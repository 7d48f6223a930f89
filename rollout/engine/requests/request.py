"""Request and Sequence: one prompt with its n samples, and each sample's tokens and computed KV.

A request starts as a single sequence and forks after prefill. A sequence has no prefill or decode
phase: `num_computed_tokens` catches up with `num_tokens`, a chunk at a time while prompt tokens are
pending, one token at a time once it is generating. They point at each other, so they share a file.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rollout.sampling_params import SamplingParams

if TYPE_CHECKING:
    import torch

    from rollout.detokenize.sample_text import SampleText
    from rollout.engine.sample.token_counts import TokenCounts
    from rollout.multimodal.mm_inputs import MultiModalInputs
    from rollout.structured_outputs.grammar_state import GrammarState


@dataclass(slots=True, eq=False)
class Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival: int
    weight_version: int
    prompt: str | None = None
    # Sample 0 first; the other n - 1 appear when sample 0's prompt is fully computed.
    sequences: list[Sequence] = field(default_factory=list)
    forked: bool = False
    num_finished: int = 0
    # With params.prompt_logprobs: one entry per prompt token computed so far, the first None
    # (rollout/engine/output/prompt_logprobs.py).
    prompt_logprobs: list[dict[int, float] | None] | None = None
    grammar: object | None = (
        None  # with structured_outputs: the compiled grammar (rollout/structured_outputs/)
    )
    stream: bool = False  # each step's new tokens are recorded for the caller (engine/output/token_stream.py)
    # Prompt tokens served from the prefix cache when first scheduled (vLLM's `num_cached_tokens`:
    # set once, a later preemption's hits are not counted); None until then.
    num_cached_tokens: int | None = None
    # With images: the processed prompt (rollout/multimodal/), and its encoder features with the weight
    # version that computed them (engine/vision/image_embeddings.py), kept until the request finishes.
    multi_modal: MultiModalInputs | None = None
    image_features: tuple[int, torch.Tensor] | None = None
    mrope: tuple[torch.Tensor, int] | None = None  # M-RoPE: the prompt's [3, L] positions, the decode delta

    def __post_init__(self) -> None:
        if self.params.prompt_logprobs is not None and self.prompt_logprobs is None:
            self.prompt_logprobs = [None]  # the first prompt token has no logprob (vLLM's shape)

    @property
    def n(self) -> int:
        return self.params.n

    @property
    def is_finished(self) -> bool:
        return self.num_finished == self.params.n

    @property
    def num_seats(self) -> int:
        """Running-sequence slots this request will occupy once forked."""
        return self.params.n - self.num_finished


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    seq_id: int
    request: Request
    token_ids: list[int]
    num_prompt_tokens: int
    # Index among the request's n samples; the parent (before the fork) is sample 0.
    sample_index: int = 0
    status: SequenceStatus = SequenceStatus.WAITING
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    # Chained hashes of this sequence's full blocks, in order (prefix-cache keys).
    block_hashes: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[int, float]] = field(default_factory=list)
    kept_log_mass: list[float] = field(default_factory=list)  # one per logprob: truncation_mass.py
    kept_token_ids: list[list[int]] = field(default_factory=list)  # one per token, on request
    finish_reason: str | None = None
    stop_reason: int | str | None = None  # the stop token id or stop string that finished it (vLLM's field)
    text: SampleText | None = None  # offline, with stop strings: its text so far (rollout/detokenize/)
    # Provenance (rollout/engine/versions/provenance.py): spans of (output token index, weight version) for
    # the weights that sampled each token and the oldest KV each token attended to, and the oldest
    # weight version among this sequence's computed KV (None while it has none).
    weight_versions: list[tuple[int, int]] = field(default_factory=list)
    kv_versions: list[tuple[int, int]] = field(default_factory=list)
    kv_version: int | None = None
    # With structured_outputs: where this sample is in its grammar (rollout/structured_outputs/grammar_state.py).
    grammar: GrammarState | None = None
    # With a repetition, frequency or presence penalty: token_ids' counts, kept across steps (token_counts.py).
    token_counts: TokenCounts | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_pending_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED
