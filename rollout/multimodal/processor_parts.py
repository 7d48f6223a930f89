"""ImageTextProcessor: a tokenizer and an image processor held together where transformers' composite
processor cannot be built (Qwen2VLProcessor builds a video processor that needs torchvision).

The engine reads `.tokenizer` and `.image_processor` of whatever processor it is given, so this and a
composite processor (LlavaProcessor, ...) are interchangeable. `load_processor` prefers the composite one.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ImageTextProcessor:
    tokenizer: Any
    image_processor: Any


def load_processor(path: str | os.PathLike) -> Any:
    """The model's AutoProcessor; else its image processor and tokenizer, loaded apart."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    try:
        return AutoProcessor.from_pretrained(path)
    except Exception as exc:  # e.g. ImportError: torchvision, for a video half the engine does not use
        logger.info("AutoProcessor(%s) failed (%s: %s); loading its parts", path, type(exc).__name__, exc)
    return ImageTextProcessor(AutoTokenizer.from_pretrained(path), AutoImageProcessor.from_pretrained(path))
