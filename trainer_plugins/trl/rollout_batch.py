"""RolloutBatch: one round's samples as TRL lays them out, and whether they are all fresh.

A round is trained on only if every sample was generated with the weights the trainer pushed;
`stale` says when one was not (another writer, a server that lost the weights).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rollout.outputs import CompletionOutput, RequestOutput


@dataclass(frozen=True)
class RolloutBatch:
    """One round's samples as TRL lays them out: a prompt's n samples consecutive, in prompt order."""

    prompt_ids: list[list[int]]  # one per unique prompt
    completion_ids: list[list[int]]  # one per sample
    logprobs: list[list[float]]  # one per sample token: log p of the sampled token (truncation.py)
    versions: list[int]  # weight version each sample was generated with
    stale: bool  # some sample was not generated with the weights this trainer pushed

    @classmethod
    def of(
        cls,
        outputs: list[RequestOutput],
        n: int,
        accepted_versions: set[int] | None,
        logprobs_of: Callable[[CompletionOutput], list[float]] = lambda sample: list(sample.token_logprobs),
    ) -> RolloutBatch:
        if any(len(output.outputs) != n for output in outputs):
            raise RuntimeError(f"the rollout server returned a prompt with other than n={n} samples")
        samples = [sample for output in outputs for sample in output.outputs]
        for sample in samples:
            if sample.token_logprobs is None or len(sample.token_logprobs) != len(sample.token_ids):
                raise RuntimeError("the rollout server returned a sample without one logprob per token")
        versions = [sample.weight_version for sample in samples]
        return cls(
            prompt_ids=[list(output.prompt_token_ids) for output in outputs],
            completion_ids=[list(sample.token_ids) for sample in samples],
            logprobs=[logprobs_of(sample) for sample in samples],
            versions=versions,
            stale=accepted_versions is not None and not set(versions) <= accepted_versions,
        )
