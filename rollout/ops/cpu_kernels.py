"""The compiled CPU kernels (csrc/), built on first use with torch's cpp_extension.

Two hot spots of a CPU decode step are memory traffic that torch ops cannot avoid: attention over a
paged cache (gather every sequence's blocks into a dense copy, then read it again) and the sampling
noise (ten passes over [rows, vocab] int64 temporaries). The kernels do each in one pass
(cpu_paged_decode.py, engine/sample/sampling_noise.py), and the sampler's race takes logs only of the tokens
that can win (engine/sample/exponential_race.py); RMSNorm, the gated MLP's activation and the KV write run
fused (fused_modules.py, paged_attention_sdpa.py). A C++ compiler is needed at first use (kernel_build.py:
one build per sources' digest, shared by every install). Without a compiler, or with
ROLLOUT_CPU_KERNELS=0, the torch paths serve, slower: the same tokens (the noise is the same bits) and
logprobs that differ from the kernels' by fp32 rounding (up to 5e-6 measured on the embedded model);
a failed build says so in one line, once, and is not retried until the compiler changes.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from types import ModuleType

import torch

from rollout.ops.kernel_build import KernelBuild, extensions_root, load_extension

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
        return load_extension(cpu_kernels_build(), extensions_root())
    except Exception as exc:  # no compiler, no headers: the torch paths serve
        logger.warning("rollout: CPU kernels unavailable, using the slower torch paths: %s", _one_line(exc))
        return None


def cpu_kernels_build() -> KernelBuild:
    """This machine's build: flags for its CPU capability; the folder's digest covers csrc/ whole."""
    capability = torch.backends.cpu.get_cpu_capability()
    return KernelBuild(
        name=f"rollout_cpu_kernels_{capability.lower().replace(' ', '_')}",
        csrc=Path(__file__).parent / "csrc",
        sources=_SOURCES,
        cflags=(
            "-O3",
            "-fopenmp",
            "-fno-trapping-math",
            "-ffp-contract=off",  # a * b + c rounds the product, as torch's separate ops do
            *_CAPABILITY_FLAGS.get(capability, []),
        ),
        ldflags=("-fopenmp",),
    )


def _one_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
