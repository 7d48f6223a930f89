"""The logits-processor and prompt-logprob fields of SamplingParams on the wire (fields 30-39).

Unset fields take SamplingParams' defaults; an allowed_token_ids message that is set but empty
reaches SamplingParams, which refuses it by name (as it refuses an empty list).
"""

from __future__ import annotations

from rollout.protocol.generated import rollout_pb2 as pb
from rollout.sampling_params import SamplingParams

_OPTIONAL = ("min_tokens", "presence_penalty", "frequency_penalty", "prompt_logprobs")


def processors_to_proto(params: SamplingParams, message: pb.SamplingParams) -> None:
    for name in _OPTIONAL:
        value = getattr(params, name)
        if name == "prompt_logprobs" and value is None:
            continue
        if name != "prompt_logprobs" and not value:
            continue  # the default: left unset
        setattr(message, name, value)
    for token_id, bias in (params.logit_bias or {}).items():
        message.logit_bias[token_id] = bias
    if params.allowed_token_ids is not None:
        message.allowed_token_ids.ids.extend(params.allowed_token_ids)
    message.bad_words.extend(params.bad_words)
    message.bad_words_token_ids.extend(pb.TokenIds(ids=ids) for ids in params.bad_words_token_ids)


def processors_from_proto(message: pb.SamplingParams) -> dict[str, object]:
    """SamplingParams keyword arguments for the fields that are set."""
    kwargs: dict[str, object] = {n: getattr(message, n) for n in _OPTIONAL if message.HasField(n)}
    if message.logit_bias:
        kwargs["logit_bias"] = dict(message.logit_bias)
    if message.HasField("allowed_token_ids"):
        kwargs["allowed_token_ids"] = tuple(message.allowed_token_ids.ids)
    if message.bad_words:
        kwargs["bad_words"] = tuple(message.bad_words)
    if message.bad_words_token_ids:
        kwargs["bad_words_token_ids"] = tuple(tuple(s.ids) for s in message.bad_words_token_ids)
    return kwargs
