"""Conversion between rollout.v1 protobuf messages and the engine's Python objects.

Shared by the servicer and the client, so both sides agree on every field; nothing here touches
gRPC or the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollout.outputs import CompletionOutput, PartialSample, RequestOutput
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.logprob_wire import (
    entries_from_proto,
    entry_to_proto,
    logprobs_from_proto,
    ranks_to_proto,
)
from rollout.protocol.processors_wire import processors_from_proto, processors_to_proto
from rollout.protocol.score_wire import prompt_logprobs_to_proto
from rollout.protocol.structured_wire import structured_from_proto, structured_to_proto
from rollout.sampling_params import SamplingParams

_FINISH_TO_PB = {
    "stop": pb.FINISH_REASON_STOP,
    "length": pb.FINISH_REASON_LENGTH,
    "abort": pb.FINISH_REASON_ABORT,
}
_FINISH_FROM_PB = {v: k for k, v in _FINISH_TO_PB.items()}
_MODE_TO_PB = {
    "processed_logprobs": pb.LOGPROBS_MODE_PROCESSED,
    "raw_logprobs": pb.LOGPROBS_MODE_RAW,
    "raw_logits": pb.LOGPROBS_MODE_RAW_LOGITS,
    "processed_logits": pb.LOGPROBS_MODE_PROCESSED_LOGITS,
}
_MODE_FROM_PB = {v: k for k, v in _MODE_TO_PB.items()}
_OPTIONAL_FIELDS = (
    "n",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "seed",
    "logprobs",
    "max_staleness",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "detokenize",
)


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What GetServerInfo reports, as Python values."""

    model: str
    architecture: str
    dtype: str
    device: str
    max_model_len: int
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    weight_version: int
    logprobs_modes: tuple[str, ...]
    block_size: int
    num_blocks_total: int
    num_blocks_free: int
    num_blocks_cached: int
    max_num_seqs: int
    has_tokenizer: bool
    version: str
    model_config: str = ""  # JSON of the model's config; "" from a server that predates it
    boot_id: str = ""  # changes when the server process restarts; "" from a server that predates it
    prefix_caching: bool = False  # False from a server that predates it
    state_bytes_per_seq: int = 0  # hybrid models: one sequence's recurrent states (docs/hybrid_models.md)
    max_state_snapshots: int = 0  # hybrid models: the state snapshot cap in effect
    default_logprobs_mode: str | None = None  # --logprobs-mode; None from a server that predates it
    weight_group_ranks: int = 1  # weight group ranks this address takes (a fleet front: one per replica)


def params_to_proto(params: SamplingParams) -> pb.SamplingParams:
    message = pb.SamplingParams(
        stop_token_ids=list(params.stop_token_ids),
        ignore_eos=params.ignore_eos,
        logprobs_mode=mode_to_proto(params.logprobs_mode),
        return_kept_tokens=params.return_kept_tokens,
        stop=list(params.stop),
        include_stop_str_in_output=params.include_stop_str_in_output,
    )
    for name in _OPTIONAL_FIELDS:
        value = getattr(params, name)
        if value is not None:
            setattr(message, name, value)
    processors_to_proto(params, message)
    structured_to_proto(params.structured_outputs, message)
    return message


def params_from_proto(message: pb.SamplingParams) -> SamplingParams:
    """Unset fields take SamplingParams defaults; raises ValueError naming the field."""
    kwargs: dict[str, object] = {n: getattr(message, n) for n in _OPTIONAL_FIELDS if message.HasField(n)}
    if message.logprobs_mode != pb.LOGPROBS_MODE_UNSPECIFIED:
        if message.logprobs_mode not in _MODE_FROM_PB:
            raise ValueError(f"logprobs_mode: unknown value {message.logprobs_mode}")
        kwargs["logprobs_mode"] = _MODE_FROM_PB[message.logprobs_mode]  # else the server's default
    kwargs.update(processors_from_proto(message))
    kwargs.update(structured_from_proto(message))
    return SamplingParams(
        **kwargs,
        stop_token_ids=tuple(message.stop_token_ids),
        ignore_eos=message.ignore_eos,
        return_kept_tokens=message.return_kept_tokens,
        stop=tuple(message.stop),
        include_stop_str_in_output=message.include_stop_str_in_output,
    )


def sample_to_proto(sample: CompletionOutput) -> pb.Sample:
    message = pb.Sample(
        index=sample.index,
        token_ids=sample.token_ids,
        logprobs=sample.token_logprobs or [],
        finish_reason=_FINISH_TO_PB[sample.finish_reason],
        weight_version=sample.weight_version,
        weight_versions=spans_to_proto(sample.weight_versions),
        kv_versions=spans_to_proto(sample.kv_versions),
        kept_log_mass=sample.kept_log_mass or [],
        kept_token_ids=[pb.TokenIds(ids=ids) for ids in sample.kept_token_ids or []],
        logprobs_mode=mode_to_proto(sample.logprobs_mode),
        logprob_ranks=ranks_to_proto(sample.token_logprobs),
    )
    message.top_logprobs.extend(_top_logprobs_to_proto(sample.top_logprobs))
    if sample.text is not None:
        message.text = sample.text
    if isinstance(sample.stop_reason, str):
        message.stop_string = sample.stop_reason
    elif sample.stop_reason is not None:
        message.stop_token_id = sample.stop_reason
    if sample.cumulative_logprob is not None:
        message.cumulative_logprob = sample.cumulative_logprob
    return message


def sample_from_proto(message: pb.Sample, logprobs: bool, top_logprobs: bool) -> CompletionOutput:
    """`logprobs`/`top_logprobs` say whether they were requested (empty lists are then real values)."""
    return CompletionOutput(
        index=message.index,
        token_ids=list(message.token_ids),
        token_logprobs=logprobs_from_proto(message.logprobs, message.logprob_ranks) if logprobs else None,
        top_logprobs=_top_logprobs_from_proto(message.top_logprobs) if top_logprobs else None,
        finish_reason=_FINISH_FROM_PB.get(message.finish_reason, "abort"),
        weight_version=message.weight_version,
        text=message.text if message.HasField("text") else None,
        weight_versions=spans_from_proto(message.weight_versions),
        kv_versions=spans_from_proto(message.kv_versions),
        kept_log_mass=list(message.kept_log_mass) if logprobs and _per_token(message) else None,
        # sent only on request (return_kept_tokens), one entry per token, so presence says it was asked for
        kept_token_ids=[list(t.ids) for t in message.kept_token_ids] if message.kept_token_ids else None,
        stop_reason=_stop_reason_from_proto(message),
        cumulative_logprob=message.cumulative_logprob if message.HasField("cumulative_logprob") else None,
        logprobs_mode=_MODE_FROM_PB.get(message.logprobs_mode),
    )


def mode_to_proto(mode: str | None) -> int:
    """None (the server's default) travels as UNSPECIFIED."""
    return pb.LOGPROBS_MODE_UNSPECIFIED if mode is None else _MODE_TO_PB[mode]


def _stop_reason_from_proto(message: pb.Sample) -> int | str | None:
    if message.HasField("stop_string"):
        return message.stop_string
    if message.HasField("stop_token_id"):
        return message.stop_token_id
    return None


def _per_token(message: pb.Sample) -> bool:
    """A server that predates kept_log_mass sends none; then the field stays None, not []."""
    return len(message.kept_log_mass) == len(message.logprobs)


def partial_to_proto(partial: PartialSample) -> pb.PartialSample:
    message = pb.PartialSample(
        index=partial.index,
        token_ids=partial.token_ids,
        logprobs=partial.logprobs or [],
        weight_versions=spans_to_proto(partial.weight_versions),
        kv_versions=spans_to_proto(partial.kv_versions),
        kept_log_mass=partial.kept_log_mass or [],
        kept_token_ids=[pb.TokenIds(ids=ids) for ids in partial.kept_token_ids or []],
        logprob_ranks=ranks_to_proto(partial.logprobs),
    )
    message.top_logprobs.extend(_top_logprobs_to_proto(partial.top_logprobs))
    return message


def partial_from_proto(message: pb.PartialSample) -> PartialSample:
    """Empty per-token lists read as absent when there are tokens (the engine then asks for them)."""
    has_tokens = bool(message.token_ids)
    return PartialSample(
        index=message.index,
        token_ids=list(message.token_ids),
        logprobs=logprobs_from_proto(message.logprobs, message.logprob_ranks)
        if message.logprobs or not has_tokens
        else None,
        top_logprobs=_top_logprobs_from_proto(message.top_logprobs)
        if message.top_logprobs or not has_tokens
        else None,
        weight_versions=spans_from_proto(message.weight_versions),
        kv_versions=spans_from_proto(message.kv_versions),
        kept_log_mass=list(message.kept_log_mass) if message.kept_log_mass or not has_tokens else None,
        kept_token_ids=[list(t.ids) for t in message.kept_token_ids]
        if message.kept_token_ids or not has_tokens
        else None,
    )


def _top_logprobs_to_proto(positions: list[dict[int, float]] | None) -> list[pb.TopLogprobs]:
    return [entry_to_proto(position) for position in positions or []]


def _top_logprobs_from_proto(messages) -> list[dict[int, float]]:
    return entries_from_proto(messages)


def spans_to_proto(spans: list[tuple[int, int]]) -> list[pb.VersionSpan]:
    return [pb.VersionSpan(first_token_index=first, version=version) for first, version in spans]


def spans_from_proto(messages) -> list[tuple[int, int]]:
    return [(m.first_token_index, m.version) for m in messages]


def result_to_proto(output: RequestOutput) -> pb.PromptResult:
    samples = [sample_to_proto(s) for s in output.outputs]
    return pb.PromptResult(
        request_id=output.request_id,
        prompt_token_ids=output.prompt_token_ids,
        samples=samples,
        prompt_logprobs=prompt_logprobs_to_proto(output.prompt_logprobs),
        num_cached_tokens=output.num_cached_tokens,
    )


def info_from_proto(message: pb.GetServerInfoResponse) -> ServerInfo:
    return ServerInfo(
        model=message.model,
        architecture=message.architecture,
        dtype=message.dtype,
        device=message.device,
        max_model_len=message.max_model_len,
        vocab_size=message.vocab_size,
        eos_token_ids=tuple(message.eos_token_ids),
        weight_version=message.weight_version,
        logprobs_modes=tuple(_MODE_FROM_PB[m] for m in message.logprobs_modes if m in _MODE_FROM_PB),
        block_size=message.block_size,
        num_blocks_total=message.num_blocks_total,
        num_blocks_free=message.num_blocks_free,
        num_blocks_cached=message.num_blocks_cached,
        max_num_seqs=message.max_num_seqs,
        has_tokenizer=message.has_tokenizer,
        version=message.version,
        model_config=message.model_config,
        boot_id=message.boot_id,
        prefix_caching=message.prefix_caching,
        state_bytes_per_seq=message.state_bytes_per_seq,
        max_state_snapshots=message.max_state_snapshots,
        default_logprobs_mode=_MODE_FROM_PB.get(message.default_logprobs_mode),
        weight_group_ranks=max(message.weight_group_ranks, 1),
    )


def logprobs_modes_proto() -> list[int]:
    return list(_MODE_TO_PB.values())
