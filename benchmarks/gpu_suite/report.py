"""What every phase of the GPU suite shares: its context, the JSON + markdown it writes to $OUT, the assembly.

A phase returns (data, markdown); `write_phase` stores both as phase_<name>.json / .md, and
`assemble` joins the markdown of every phase present into the docs/benchmarks.md section.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

BENCHMARKS = Path(__file__).resolve().parent.parent  # benchmarks/: the scripts the phases reuse
SECTION_BEGIN = "<!-- gpu-suite:begin -->"
SECTION_END = "<!-- gpu-suite:end -->"


@dataclass(frozen=True)
class Context:
    out: Path
    dry_run: bool

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"

    @property
    def device_name(self) -> str:
        if self.device == "cuda":
            return torch.cuda.get_device_name(0)
        return f"CPU ({platform.processor() or platform.machine()}), dry run"


def write_phase(ctx: Context, name: str, data: dict, markdown: str) -> None:
    ctx.out.mkdir(parents=True, exist_ok=True)
    payload = {"phase": name, "device": ctx.device_name, "dry_run": ctx.dry_run, **data}
    (ctx.out / f"phase_{name}.json").write_text(json.dumps(payload, indent=2, default=str))
    (ctx.out / f"phase_{name}.md").write_text(markdown.rstrip() + "\n")


def table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def assemble(out: Path) -> str:
    """The docs/benchmarks.md section from every phase's markdown in `out` (written to out/benchmarks_section.md)."""
    parts = [SECTION_BEGIN, "## GPU suite (`scripts/gpu_suite.sh`)", ""]
    for md in sorted(out.glob("phase_*.md")):
        meta = json.loads(md.with_suffix(".json").read_text())
        parts += [f"### Phase {meta['phase']} on {meta['device']}", "", md.read_text().rstrip(), ""]
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
