"""Tiny image-text-to-text models built from configs with a seed (no hub, no torchvision), their processors
built locally, and real PIL images made in the test."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from transformers import (
    CLIPImageProcessorPil,
    CLIPVisionConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
)

from tests.builders import char_tokenizer

IMAGE_TOKEN = "<image>"
IMAGE_SIZE = 28  # 2x2 patches of 14: four image tokens per image
LLAVA_CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{% if m.content is string %}{{ m.content }}{% else %}"
    "{% for part in m.content %}{% if part.type == 'text' %}{{ part.text }}{% else %}<image>{% endif %}"
    "{% endfor %}{% endif %}</{{ m.role }}>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)


def llava_config(image_size: int = IMAGE_SIZE, strategy: str = "default") -> LlavaConfig:
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=image_size,
        patch_size=14,
        projection_dim=32,
    )
    text = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    return LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=llava_tokenizer().convert_tokens_to_ids(IMAGE_TOKEN),
        projector_hidden_act="gelu",
        vision_feature_layer=-1,
        vision_feature_select_strategy=strategy,
    )


def tiny_llava(seed: int = 0, **config: object) -> LlavaForConditionalGeneration:
    """fp32, random; the output scale raised so greedy choices are unambiguous."""
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(llava_config(**config)).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model


def reference_llava(model: LlavaForConditionalGeneration) -> LlavaForConditionalGeneration:
    """An independent copy with the same weights, for transformers' own forward and generate."""
    clone = LlavaForConditionalGeneration(LlavaConfig.from_dict(model.config.to_dict())).eval()
    clone.load_state_dict(model.state_dict())
    clone.set_attn_implementation("eager")
    return clone


def llava_tokenizer():
    tokenizer = char_tokenizer(LLAVA_CHAT_TEMPLATE)
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    return tokenizer


def llava_processor(image_size: int = IMAGE_SIZE, strategy: str = "default") -> LlavaProcessor:
    images = CLIPImageProcessorPil(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    )
    return LlavaProcessor(
        image_processor=images,
        tokenizer=llava_tokenizer(),
        patch_size=14,
        vision_feature_select_strategy=strategy,
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=1,
        chat_template=LLAVA_CHAT_TEMPLATE,
    )


def random_image(seed: int, width: int = 40, height: int = 30) -> Image.Image:
    """A real RGB picture (noise), different for every seed."""
    pixels = np.random.RandomState(seed).randint(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels, "RGB")


PINPOINTS = [[28, 56], [56, 28], [56, 56]]


def tiny_llava_next(seed: int = 0):
    """LLaVA-NeXT over the same towers: images tiled at any resolution, image_newline rows."""
    from transformers import LlavaNextConfig, LlavaNextForConditionalGeneration

    base = llava_config()
    config = LlavaNextConfig(
        vision_config=base.vision_config.to_dict(),
        text_config=base.text_config.to_dict(),
        image_token_id=base.image_token_id,
        image_grid_pinpoints=PINPOINTS,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    torch.manual_seed(seed)
    model = LlavaNextForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model


def llava_next_processor():
    from transformers import LlavaNextProcessor
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

    crop = {"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    images = LlavaNextImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size=crop, image_grid_pinpoints=PINPOINTS
    )
    return LlavaNextProcessor(
        image_processor=images,
        tokenizer=llava_tokenizer(),
        patch_size=14,
        vision_feature_select_strategy="default",
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=1,
        chat_template=LLAVA_CHAT_TEMPLATE,
    )


def reference_of(model):
    """An independent eager copy of any of these models."""
    clone = type(model)(type(model.config).from_dict(model.config.to_dict())).eval()
    clone.load_state_dict(model.state_dict())
    clone.set_attn_implementation("eager")
    return clone
