"""A tiny Mistral 3 (Pixtral tower + Mistral) from configs with a seed, its image processor (the PIL one) and
a character tokenizer with Pixtral's image tokens. PixtralProcessor needs torchvision here, so the oracle's
ids are made the way it makes them: each [IMG] becomes rows of [IMG] tokens ended by [IMG_BREAK], the
last by [IMG_END]."""

from __future__ import annotations

import torch
from transformers import Mistral3Config, Mistral3ForConditionalGeneration, PixtralVisionConfig
from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

from rollout.multimodal.processor_parts import ImageTextProcessor
from tests.builders import char_tokenizer

TOKENS = ["[IMG]", "[IMG_BREAK]", "[IMG_END]"]
STEP = 28  # patch 14 x spatial merge 2


def pixtral_tokenizer():
    tokenizer = char_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": TOKENS})
    return tokenizer


def tiny_mistral3(seed: int = 0) -> Mistral3ForConditionalGeneration:
    vision = PixtralVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                 image_size=112, patch_size=14, head_dim=16)  # fmt: skip
    text = dict(model_type="mistral", vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, head_dim=16,
                sliding_window=None, bos_token_id=1, eos_token_id=2, pad_token_id=0)  # fmt: skip
    image = pixtral_tokenizer().convert_tokens_to_ids("[IMG]")
    config = Mistral3Config(vision_config=vision.to_dict(), text_config=text, image_token_index=image,
                            spatial_merge_size=2, projector_hidden_act="gelu", vision_feature_layer=-1)  # fmt: skip
    torch.manual_seed(seed)
    model = Mistral3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model


def pixtral_image_processor() -> PixtralImageProcessorPil:
    return PixtralImageProcessorPil(size={"longest_edge": 112}, patch_size=14)


def pixtral_processor() -> ImageTextProcessor:
    return ImageTextProcessor(pixtral_tokenizer(), pixtral_image_processor())


def pixtral_inputs(text: str, images: list) -> dict[str, torch.Tensor]:
    """What PixtralProcessor returns (its image processor given the merged patch size, as it gives it)."""
    pixels = pixtral_image_processor()(images=images, return_tensors="pt", patch_size=STEP)
    tokenizer = pixtral_tokenizer()
    image, image_break, image_end = tokenizer.convert_tokens_to_ids(TOKENS)
    parts = text.split("[IMG]")
    ids = tokenizer(parts[0])["input_ids"]
    for (height, width), part in zip(pixels["image_sizes"].tolist(), parts[1:], strict=True):
        layout = ([image] * (width // STEP) + [image_break]) * (height // STEP)
        ids += layout[:-1] + [image_end] + tokenizer(part)["input_ids"]
    return dict(input_ids=torch.tensor([ids]), **pixels)
