"""Tiny Qwen2-VL / Qwen2.5-VL models from configs with a seed, with their image processor (the PIL one: no
torchvision) and a character tokenizer holding the vision special tokens. Qwen2VLProcessor itself needs
torchvision (its video half), so the oracle's inputs are made the way it makes them: each
<|image_pad|> expanded to t*h*w/merge**2 copies."""

from __future__ import annotations

import torch
from transformers import (
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from rollout.multimodal.processor_parts import ImageTextProcessor
from tests.builders import char_tokenizer

SPECIAL = ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>"]
TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=128, max_position_embeddings=512, bos_token_id=1,
            eos_token_id=2, pad_token_id=0, rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]})  # fmt: skip
_CLASSES = {"qwen2_vl": (Qwen2VLConfig, Qwen2VLForConditionalGeneration),
            "qwen2_5_vl": (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration)}  # fmt: skip


def qwen_tokenizer():
    tokenizer = char_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL})
    return tokenizer


def tiny_qwen_vl(family: str = "qwen2_vl", seed: int = 0):
    config_cls, model_cls = _CLASSES[family]
    start, pad, end = qwen_tokenizer().convert_tokens_to_ids(SPECIAL)
    vision = dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, patch_size=14, spatial_merge_size=2)
    if family == "qwen2_5_vl":
        vision = dict(depth=1, hidden_size=32, out_hidden_size=64, intermediate_size=64, num_heads=2,
                      patch_size=14, spatial_merge_size=2, window_size=56, fullatt_block_indexes=[0])  # fmt: skip
    config = config_cls(text_config=TEXT, vision_config=vision, image_token_id=pad, vision_start_token_id=start,
                        vision_end_token_id=end, video_token_id=0)  # fmt: skip
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model


def reference_qwen_vl(model):
    clone = type(model)(type(model.config).from_dict(model.config.to_dict())).eval()
    clone.load_state_dict(model.state_dict())
    clone.set_attn_implementation("eager")
    return clone


def qwen_image_processor() -> Qwen2VLImageProcessorPil:
    return Qwen2VLImageProcessorPil(min_pixels=28 * 28 * 4, max_pixels=56 * 56 * 4, patch_size=14, merge_size=2,
                                    temporal_patch_size=2)  # fmt: skip


def qwen_processor() -> ImageTextProcessor:
    return ImageTextProcessor(qwen_tokenizer(), qwen_image_processor())


def qwen_inputs(text: str, images: list) -> dict[str, torch.Tensor]:
    """What Qwen2VLProcessor returns: the image pads expanded, pixel values, grids, token types."""
    pixels = qwen_image_processor()(images=images, return_tensors="pt")
    counts = iter((pixels["image_grid_thw"].prod(-1) // 4).tolist())
    parts = text.split("<|image_pad|>")
    expanded = parts[0] + "".join("<|image_pad|>" * next(counts) + part for part in parts[1:])
    ids = torch.tensor([qwen_tokenizer()(expanded)["input_ids"]])
    pad = qwen_tokenizer().convert_tokens_to_ids("<|image_pad|>")
    return dict(input_ids=ids, mm_token_type_ids=(ids == pad).int(), **pixels)
