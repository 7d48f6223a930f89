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
    "pytest",
    "hypothesis",
    "rollout.protocol.generated.weights_pb2",
    "rollout.server.app",
    "rollout.client",
)


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
    if ctx.device == "cuda" and not torch.cuda.is_available():
        failures["cuda"] = "torch sees no CUDA device"
    if not failures:
        data["smoke_tokens"] = _smoke(ctx.device)
    rows = [[k, v] for k, v in versions.items()] + [[k, f"FAILED {v}"] for k, v in failures.items()]
    return data, table(["component", "version"], rows)


def _smoke(device: str) -> list[int]:
    """One greedy generate of the embedded default model on the device: the engine starts there."""
    from rollout import LLM, EngineConfig, SamplingParams

    llm = LLM(config=EngineConfig(device=device))
    out = llm.generate([[1, 2, 3, 4]], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    return out[0].outputs[0].token_ids


def failed(data: dict) -> bool:
    return bool(data["import_failures"])
