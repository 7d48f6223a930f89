"""rollout: RL rollout generation with continuous batching, N samples per prompt and in-place weight updates."""

from rollout.config import EngineConfig
from rollout.llm import LLM
from rollout.outputs import CompletionOutput, RequestOutput
from rollout.sampling_params import SamplingParams

__all__ = ["LLM", "CompletionOutput", "EngineConfig", "RequestOutput", "SamplingParams"]
__version__ = "0.1.0"
