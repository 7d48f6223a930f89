"""Phase a: the lent machine's environment: versions, the device, every import the project needs, one tiny generate."""

from __future__ import annotations

import importlib
import sys

import torch

from benchmarks.gpu_suite.report import Context, table

MODULES = (
    "grpc",
    "grpc_health.v1.health",
    "grpc_reflection.v1alpha.reflection",
    "google.protobuf",
    "safetensors",
    "transformers",
    "triton",
    "peft",
    "pytest",
    "xdist",
    "hypothesis",
    "rollout.protocol.generated.weights_pb2",
    "rollout.server.app",
    "rollout.client",
)
OPTIONAL = {"xdist"}  # pytest-xdist only spreads phase b's Triton compiles over workers


def run(ctx: Context) -> tuple[dict, str]:
    versions = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda}
    failures = {}
    for name in MODULES:
        try:
            module = importlib.import_module(name)
            versions[name] = getattr(module, "__version__", "ok")
        except Exception as err:  # every failure is reported, not just the first
            failures[name] = f"{type(err).__name__}: {err}"
    data = {"versions": versions, "import_failures": failures, "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        versions["device"] = (
            f"{torch.cuda.get_device_name(0)}, {free / 2**30:.1f} of {total / 2**30:.1f} GiB free"
        )
    elif ctx.device == "cuda":
        failures["cuda"] = "torch sees no CUDA device"
    if not set(failures) - OPTIONAL:
        data["smoke_tokens"] = _smoke(ctx.device)
    rows = [[k, v] for k, v in versions.items()]
    rows += [[k, f"{'missing (optional)' if k in OPTIONAL else 'FAILED'}: {v}"] for k, v in failures.items()]
    return data, table(["component", "version"], rows)


def _smoke(device: str) -> list[int]:
    """One greedy generate of the embedded default model on the device: the engine starts there."""
    from rollout import LLM, EngineConfig, SamplingParams

    llm = LLM(config=EngineConfig(device=device))
    out = llm.generate([[1, 2, 3, 4]], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    return out[0].outputs[0].token_ids


def failed(data: dict) -> bool:
    """A missing import or device stops the call (plan.STOPS_THE_CALL)."""
    return bool(set(data["import_failures"]) - OPTIONAL)
