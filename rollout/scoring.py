"""Scoring: teacher-forced logprobs of whole given sequences, as prompt logprobs of a one-token request.

`LLM.score`, the `Score` RPC and `RolloutClient.score` share these objects. A sequence is run as a
prompt with `prompt_logprobs` (engine/output/prompt_logprobs.py) and one greedy token that is thrown away,
so it is batched, chunked and preempted like any request, and its blocks enter the prefix cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollout.outputs import RequestOutput
from rollout.sampling_params import SamplingParams


@dataclass(slots=True)
class ScoreOutput:
    """`logprobs[i]` is log p(token_ids[i + 1] | token_ids[: i + 1]): fp32 log-softmax of the model's logits.

    `top_logprobs[i]`, with top_logprobs=k, holds the k most likely tokens at that position plus
    token_ids[i + 1] when it is not among them. `weight_version` is the oldest weight version any
    of the sequence's positions was computed with.
    """

    request_id: str
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[dict[int, float]] | None
    weight_version: int


_CROSS_ENCODER = (
    "LLM.score here returns teacher-forced logprobs of token-id sequences, score(token_ids_list=[[ids...]], "
    "top_logprobs=None); vLLM's score(text_1, text_2) ranks text pairs with a cross-encoder or embedding "
    "model, which rollout does not serve. To score a completion, tokenize prompt + completion and pass the ids"
)


def score_params(top_logprobs: int | None) -> SamplingParams:
    if isinstance(top_logprobs, (str, list, tuple, dict)):  # vLLM's score(text_1, text_2)
        raise ValueError(_CROSS_ENCODER)
    if top_logprobs is not None and (isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int)):
        raise ValueError(f"top_logprobs must be an integer or None, got {top_logprobs!r}")
    if top_logprobs is not None and top_logprobs < 0:
        raise ValueError(f"top_logprobs must be >= 0, got {top_logprobs}")
    return SamplingParams(
        max_tokens=1,
        temperature=0.0,
        ignore_eos=True,
        prompt_logprobs=top_logprobs or 0,
        logprobs_mode="raw_logprobs",  # logprobs whatever the engine's default mode (logits modes included)
        detokenize=False,  # the one sampled token is thrown away; no decoded_token on the entries
    )


def check_sequences(sequences: object) -> list[list[int]]:
    """The sequences as lists; ValueError naming `token_ids_list` for anything else (ids are checked by the engine)."""
    if isinstance(sequences, str) or (isinstance(sequences, (list, tuple)) and _has_text(sequences)):
        raise ValueError(_CROSS_ENCODER)
    if isinstance(sequences, (str, bytes)) or not isinstance(sequences, (list, tuple)) or not sequences:
        raise ValueError("token_ids_list must be a non-empty list of token-id lists")
    out = []
    for i, seq in enumerate(sequences):
        if isinstance(seq, (str, bytes)) or not isinstance(seq, (list, tuple)) or not seq:
            raise ValueError(f"token_ids_list[{i}] must be a non-empty list of token ids")
        out.append(list(seq))
    return out


def _has_text(sequences: list | tuple) -> bool:
    """Whether vLLM's text (or its prompt dicts) was passed where token ids are expected."""
    return any(isinstance(seq, (str, dict)) for seq in sequences)


def score_output(output: RequestOutput, top_logprobs: int | None) -> ScoreOutput:
    entries = output.prompt_logprobs
    if entries is None:
        raise RuntimeError(f"request {output.request_id} finished without its prompt logprobs (aborted?)")
    ids = output.prompt_token_ids
    sample = output.outputs[0]
    versions = [sample.weight_version] + [version for _, version in sample.kv_versions]
    return ScoreOutput(
        request_id=output.request_id,
        token_ids=list(ids),
        logprobs=[entry[token] for entry, token in zip(entries[1:], ids[1:], strict=True)],
        top_logprobs=list(entries[1:]) if top_logprobs else None,
        weight_version=min(versions),
    )
