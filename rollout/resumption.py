"""Resuming aborted samples from the caller's side: find them in a call's outputs, send each back as a
one-sample request, put the continuations in place. Shared by the offline `LLM` and the client, so both
resume the same way (the engine's half, continuing one partial sample, is engine/versions/resume.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rollout.outputs import CompletionOutput, PartialSample, RequestOutput
from rollout.sampling_params import SamplingParams


@dataclass(frozen=True, slots=True)
class Resumption:
    """One aborted sample to continue: where it sits in the caller's outputs, its prompt, its partial."""

    output_index: int
    prompt_token_ids: list[int]
    partial: PartialSample


def aborted_samples(outputs: list[RequestOutput]) -> list[Resumption]:
    """Every sample of `outputs` that finished with "abort", in order."""
    return [
        Resumption(i, list(out.prompt_token_ids), PartialSample.of(sample))
        for i, out in enumerate(outputs)
        for sample in out.outputs
        if sample.finish_reason == "abort"
    ]


def single_sample(params: SamplingParams) -> SamplingParams:
    """The params of one resumed sample: the request's, with n = 1."""
    return replace(params, n=1)


def merge_resumed(
    outputs: list[RequestOutput], todo: list[Resumption], resumed: list[CompletionOutput]
) -> list[RequestOutput]:
    """`outputs` with each resumed sample in place of its partial (new objects; samples in index order)."""
    merged = [replace(out, outputs=list(out.outputs)) for out in outputs]
    for job, sample in zip(todo, resumed, strict=True):
        samples = merged[job.output_index].outputs
        samples[:] = [sample if s.index == sample.index else s for s in samples]
    return merged
