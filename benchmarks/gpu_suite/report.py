"""What every phase of the GPU suite shares: its context (with its time box), the one JSON it writes to $OUT,
the assembly of the docs/benchmarks.md section.

A phase returns (data, markdown); `write_phase` stores both in phase_<name>.json (the markdown under
"markdown": one file per phase, so a device call's results stay under the 8 files that come back), and
`assemble` joins the markdown of every phase present into the section.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.gpu_suite.plan import PHASES

BENCHMARKS = Path(__file__).resolve().parent.parent  # benchmarks/: the scripts the phases reuse
SECTION_BEGIN = "<!-- gpu-suite:begin -->"
SECTION_END = "<!-- gpu-suite:end -->"


@dataclass(frozen=True)
class Context:
    out: Path
    dry_run: bool
    deadline: float = float("inf")  # time.monotonic() by which the phase must have written its report
    phase: str = ""  # the phase running in this process (its checkpoints' file)

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"

    @property
    def device_name(self) -> str:
        import torch  # here: the orchestrating process never loads torch

        if self.device == "cuda" and torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
        return (
            f"CPU ({platform.processor() or platform.machine()}), dry run"
            if self.dry_run
            else "no CUDA device"
        )

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()

    def allows(self, seconds: float) -> bool:
        """Whether a step expected to take `seconds` still fits the phase's time box."""
        return self.seconds_left() >= seconds

    def checkpoint(self, data: dict, markdown: str) -> None:
        """The report so far, marked partial: what survives if the process is killed before it ends."""
        write_phase(
            self, self.phase, {**data, "partial": True}, markdown + "\n\n(partial: the phase did not end)"
        )


def skipped(reason: str = "time box reached") -> str:
    """How a case, run or transport that did not run is marked in a phase's data and table."""
    return f"SKIPPED ({reason})"


def write_phase(ctx: Context, name: str, data: dict, markdown: str) -> None:
    ctx.out.mkdir(parents=True, exist_ok=True)
    device = data.pop("device") if "device" in data else ctx.device_name  # the orchestrator never loads torch
    payload = {"phase": name, "device": device, "dry_run": ctx.dry_run, **data}
    payload["markdown"] = markdown.rstrip() + "\n"
    (ctx.out / f"phase_{name}.json").write_text(json.dumps(payload, indent=2, default=str))


def table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value).replace("|", "\\|")  # |dlp| in a cell would end it


def assemble(out: Path) -> str:
    """The docs/benchmarks.md section from every phase report in `out` (written to out/benchmarks_section.md)."""
    parts = [SECTION_BEGIN, "## GPU suite (`scripts/gpu_suite.sh`)", ""]
    reports = [json.loads(path.read_text()) for path in out.glob("phase_*.json")]
    for meta in sorted(reports, key=lambda r: list(PHASES).index(r["phase"])):
        parts += [f"### Phase {meta['phase']} on {meta['device']}", "", meta["markdown"].rstrip(), ""]
    parts.append(SECTION_END)
    section = "\n".join(parts) + "\n"
    (out / "benchmarks_section.md").write_text(section)
    return section


def splice_into(doc: Path, section: str) -> None:
    """Replaces the suite's section of `doc` (between the markers), or appends it."""
    text = doc.read_text()
    if SECTION_BEGIN in text and SECTION_END in text:
        head, rest = text.split(SECTION_BEGIN, 1)
        text = head + section.rstrip("\n") + rest.split(SECTION_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    doc.write_text(text)
