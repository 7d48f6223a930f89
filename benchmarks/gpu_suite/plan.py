"""The suite's plan for a 15-minute lease: the phases of each of the two device calls and their time boxes.

The seconds are what the first lease measured (an H200, 2026-11-28: docs/gpu_suite.md), padded, and
for phase b's Triton matrix that the box cut off there, estimated: a phase past its box skips what is left
and still writes its report, so a box can be wrong safely.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    name: str
    module: str  # benchmarks/gpu_suite/<module>.py: run(ctx) -> (data, markdown), failed(data) -> bool
    seconds: float  # reserved for it in its call (its process killed GRACE seconds past its own deadline)


PHASES: dict[str, Phase] = {
    p.name: p
    for p in (
        Phase("a", "phase_env", 35),  # measured 29 s (the process; 20.5 s inside)
        Phase("b", "phase_tests", 160),  # gpu tests 21 s, essential Triton 42 s; the rest cut off (~60 s)
        Phase("c", "phase_parity", 65),  # measured 48-49 s; the bf16 cases' fp32 reference added since
        Phase("h", "phase_hybrid", 25),  # measured 20 s (the process; 6.1 s inside)
        Phase("l", "phase_lora", 20),  # measured 16 s (the process; 2.5 s inside)
        Phase("d1", "phase_speed_grpo", 150),  # measured 141 s: generate_batch's two runs are 86 s of it
        Phase("d2", "phase_speed_decode", 60),  # measured 53 s; the step profiles added since
        Phase("e", "phase_weights", 105),  # measured 99 s
        Phase("s", "phase_sleep", 45),  # sleep mode (issue 40); not yet measured, not in the default calls
    )
}
# call 1: what must be proven first (it runs, and it is right); call 2: how fast
CALLS: dict[int, tuple[str, ...]] = {1: ("a", "b", "c", "h", "l"), 2: ("d1", "d2", "e")}
# the `run` tool's timeout_s for each call (docs/gpu_suite.md): the phases, the wheels' install, the assembly
CALL_TIMEOUT_S: dict[int, int] = {1: 340, 2: 350}
# scripts/gpu_suite.sh around the phases: installing .whl/ (~15 s; skipped on a warm machine), the assembly
OVERHEAD_SECONDS = 25.0
# A CPU dry run (--dry-run) checks code paths, not speed: its boxes are the plan's times this many times
# over, so they stop only a hang (on a busy 2-core CPU phase h took 109 s against its 25 s reservation)
DRY_RUN_SCALE = 8.0
GRACE = 10.0  # seconds past a phase's deadline before its process (and its children) are killed
MIN_BOX = 15.0  # a phase given less than this is skipped rather than started
STOPS_THE_CALL = "a"  # a broken environment (an import, no CUDA) makes every later phase meaningless


def call_seconds(names: list[str]) -> float:
    """The time a run of `names` plans for: their reservations together (call 1: 305 s, call 2: 315 s)."""
    return sum(PHASES[n].seconds for n in names)


def time_box(seconds_left: float, later: list[str]) -> float:
    """Seconds the next phase may take: what the call has left after the later phases' reservations, so
    the time an earlier phase did not use goes to the next one, and no phase eats a later one's share."""
    return seconds_left - call_seconds(later)
