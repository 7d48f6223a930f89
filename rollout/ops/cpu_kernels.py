"""The compiled CPU kernels (csrc/), built on first use with torch's cpp_extension.

Two hot spots of a CPU decode step are memory traffic that torch ops cannot avoid: attention over a
paged cache (gather every sequence's blocks into a dense copy, then read it again) and the sampling
noise (ten passes over [rows, vocab] int64 temporaries). The kernels do each in one pass
(cpu_paged_decode.py, engine/sampling_noise.py), and the sampler's race takes logs only of the tokens
that can win (engine/exponential_race.py); RMSNorm, the gated MLP's activation and the KV write run
fused (fused_modules.py, paged_attention_sdpa.py). A C++ compiler is needed at first use; the build is
cached in torch's extension directory, one per CPU capability. Without a compiler, or with
ROLLOUT_CPU_KERNELS=0, the torch paths serve, exactly, only slower; a failed build says so once.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from pathlib import Path
from types import ModuleType

import torch

logger = logging.getLogger(__name__)

DISABLE_ENV = "ROLLOUT_CPU_KERNELS"
_SOURCES = (
    "bindings.cpp",
    "paged_decode_cpu.cpp",
    "sampling_noise_cpu.cpp",
    "exponential_race_cpu.cpp",
    "fused_cpu.cpp",
)
_CAPABILITY_FLAGS = {
    "AVX2": ["-mavx2", "-mfma"],
    "AVX512": ["-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mavx2", "-mfma"],
}


@functools.cache
def load_cpu_kernels() -> ModuleType | None:
    """The compiled module (bindings.cpp lists its functions), or None when disabled or unbuildable."""
    if os.environ.get(DISABLE_ENV, "1") == "0":
        return None
    try:
        from torch.utils.cpp_extension import load

        capability = torch.backends.cpu.get_cpu_capability()
        csrc = Path(__file__).parent / "csrc"
        return load(
            f"rollout_cpu_kernels_{capability.lower().replace(' ', '_')}",
            [str(csrc / name) for name in _SOURCES],
            extra_cflags=[
                "-O3",
                "-fopenmp",
                "-fno-trapping-math",
                "-ffp-contract=off",  # a * b + c rounds the product, as torch's separate ops do
                *_CAPABILITY_FLAGS.get(capability, []),
                _headers_digest(csrc),
            ],
            extra_ldflags=["-fopenmp"],
        )
    except Exception as exc:  # no compiler, no headers: the torch paths are exact too
        logger.warning("rollout's CPU kernels are unavailable (%s); using the torch paths", exc)
        return None


def _headers_digest(csrc: Path) -> str:
    """A define naming the headers' contents: torch rebuilds when the flags change, and it hashes only
    the sources, so without it an edited header would keep a stale build."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(csrc.glob("*.h")))).hexdigest()[:16]
    return f"-DROLLOUT_HEADERS={digest}"
