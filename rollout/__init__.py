"""rollout: RL rollout generation with continuous batching, N samples per prompt and in-place weight updates.

`LLM` loads lazily (PEP 562): it pulls in torch and transformers, which `rollout --help`, the client and
the config classes do without.
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING, Any

from rollout.config import EngineConfig
from rollout.outputs import CompletionOutput, RequestOutput
from rollout.sampling_params import SamplingParams

if TYPE_CHECKING:
    from rollout.llm import LLM

__all__ = ["LLM", "CompletionOutput", "EngineConfig", "RequestOutput", "SamplingParams"]
try:
    __version__ = metadata.version("rollout")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0.0.0+source"


def __getattr__(name: str) -> Any:
    if name == "LLM":
        from rollout.llm import LLM

        return LLM
    raise AttributeError(f"module 'rollout' has no attribute {name!r}")
