"""In-flight update policies: what a weight update does to the samples still being generated.

The engine consults the policy once, at the step boundary where the new weights were committed; the
policy only reads the requests and returns an `InFlightPlan` (what to abort, what to recompute),
which the engine applies:
- "wait": refuse while requests are unfinished (the server's loop drains them first);
- "abort": samples that have tokens come back at once with their tokens and logprobs
  (finish reason "abort"); nothing is thrown away;
- "keep": sequences continue under the new weights with their KV as it is (their `kv_versions`
  spans say how old the KV each token attended to was);
- "recompute": sequences drop their KV and recompute it with the new weights, as a preemption
  by recompute does, keeping their sampled tokens and logprobs.
A request that has sampled nothing yet has nothing to return, so "abort" recomputes it instead.
`max_staleness` (per request, else the engine's default) is how many versions a sample's KV may
fall behind before the policy applies; under "keep" a sample beyond it is recomputed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rollout.engine.requests.request import Request, Sequence

IN_FLIGHT_POLICIES = ("wait", "abort", "keep", "recompute")


def check_in_flight(in_flight: object) -> str:
    if in_flight not in IN_FLIGHT_POLICIES:
        raise ValueError(f"in_flight must be one of {IN_FLIGHT_POLICIES}, got {in_flight!r}")
    return in_flight  # type: ignore[return-value]


@dataclass(slots=True)
class InFlightReport:
    """What one update did to the tokens in flight (KV tokens kept or recomputed, output tokens returned)."""

    num_tokens_kept: int = 0
    num_tokens_recomputed: int = 0
    num_tokens_returned_partial: int = 0

    def add(self, other: InFlightReport) -> None:
        self.num_tokens_kept += other.num_tokens_kept
        self.num_tokens_recomputed += other.num_tokens_recomputed
        self.num_tokens_returned_partial += other.num_tokens_returned_partial

    def as_stats(self, prefix: str) -> dict[str, int]:
        return {f"{prefix}{name.removeprefix('num_')}": value for name, value in asdict(self).items()}


@dataclass(slots=True)
class InFlightPlan:
    """What the engine does to its unfinished requests after a commit: the policy decides, the engine acts."""

    abort: list[str] = field(default_factory=list)  # request ids: their samples come back now
    recompute: list[Sequence] = field(default_factory=list)  # sequences whose KV is dropped and recomputed
    report: InFlightReport = field(default_factory=InFlightReport)


class InFlightPolicy:
    """One update's policy; `plan` runs right after the commit, between two engine steps."""

    def __init__(self, name: str, default_max_staleness: int | None = None) -> None:
        self.name = check_in_flight(name)
        self.default_max_staleness = default_max_staleness

    @property
    def needs_idle(self) -> bool:
        return self.name == "wait"

    def check_idle(self, has_unfinished_requests: bool) -> None:
        """Refuses "wait" while requests are unfinished (the engine's caller drains or aborts them first)."""
        if self.needs_idle and has_unfinished_requests:
            raise RuntimeError(
                "update_weights needs an idle engine: drain or abort the unfinished requests first, "
                'or pass in_flight="abort" | "keep" | "recompute"'
            )

    def plan(self, requests: Iterable[Request], version: int) -> InFlightPlan:
        plan = InFlightPlan()
        report = plan.report
        for request in requests:
            live = [seq for seq in request.sequences if not seq.is_finished]
            action = self._action(request, live, version)
            if action == "keep":
                report.num_tokens_kept += sum(seq.num_computed_tokens for seq in live)
            elif action == "abort":
                report.num_tokens_returned_partial += sum(seq.num_output_tokens for seq in live)
                plan.abort.append(request.request_id)
            else:
                report.num_tokens_recomputed += sum(seq.num_computed_tokens for seq in live)
                plan.recompute += [seq for seq in live if seq.num_computed_tokens > 0]
        return plan

    def _action(self, request: Request, live: list[Sequence], version: int) -> str:
        versions = [seq.kv_version for seq in live if seq.kv_version is not None]
        if not versions:
            return "keep"  # no KV yet: it will be computed with the new weights
        bound = request.params.max_staleness
        if bound is None:
            bound = self.default_max_staleness
        if bound is None:
            return self._policy_action(request)
        if version - min(versions) <= bound:
            return "keep"
        return "recompute" if self.name == "keep" else self._policy_action(request)

    def _policy_action(self, request: Request) -> str:
        if self.name == "keep":
            return "keep"
        if self.name == "abort" and any(seq.num_output_tokens for seq in request.sequences):
            return "abort"
        return "recompute"
