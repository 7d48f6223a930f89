"""Request: one prompt and its n samples, which start as a single sequence and fork after prefill."""

from __future__ import annotations

from dataclasses import dataclass, field

from rollout.engine.sequence import Sequence
from rollout.sampling_params import SamplingParams


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
