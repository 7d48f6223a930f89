"""load_engine: the one place that decides how an engine is built from a model path.

It sits above `engine/` and `distributed/`: one device builds an `LLMEngine` directly; N ranks start
the tensor-parallel workers, which hand the engine their driver runner at construction. The engine
itself never imports a launcher.
"""

from __future__ import annotations

import logging
import os
import time

from rollout.config import EngineConfig
from rollout.engine.llm_engine import LLMEngine
from rollout.engine.model import model_loader
from rollout.engine.model.model_path import check_model_path
from rollout.engine.vision.vision_model import takes_images

logger = logging.getLogger(__name__)


def load_engine(
    model: str | os.PathLike,
    config: EngineConfig | None = None,
    tokenizer: model_loader.TokenizerArg = None,
) -> LLMEngine:
    """An engine over the model at `model` (a path or hub id), on one device or `tensor_parallel_size` ranks."""
    check_model_path(model)
    config = config or EngineConfig()
    if config.tensor_parallel_size > 1 and takes_images(model):
        raise ValueError(
            "tensor_parallel_size: image-text-to-text models run on one device (the vision encoder and the "
            "image features are not sharded)"
        )
    if config.tensor_parallel_size > 1:  # rank 0 of N: rollout/distributed/
        from rollout.distributed.launch import start_driver

        return start_driver(model, config, tokenizer)
    logger.info("loading the weights of %s", model)
    start = time.monotonic()
    hf_model, hf_tokenizer = model_loader.load_pretrained(model, config, tokenizer)
    logger.info(
        "weights loaded in %.1f s (%s, %s); building the engine",
        time.monotonic() - start,
        str(hf_model.dtype).removeprefix("torch."),
        hf_model.device,
    )
    return LLMEngine(hf_model, hf_tokenizer, config, model_name=str(model))
