"""A tiny Idefics3 (SigLIP tower + pixel shuffle + Llama) from configs with a seed, and its processor built
locally (Idefics3Processor builds without torchvision): images split into tiles, each with its row/column
marker, then the global image."""

from __future__ import annotations

import torch
from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

from tests.builders import char_tokenizer

TILE = 28  # the tower's image size: 2x2 patches of 14, 1 token per tile after a pixel shuffle of 2
MARKERS = ["<fake_token_around_image>", "<global-img>"] + [
    f"<row_{r}_col_{c}>" for r in (1, 2, 3) for c in (1, 2, 3)
]
TEMPLATE = (
    "{% for m in messages %}{% for part in m.content %}{% if part.type == 'text' %}{{ part.text }}"
    "{% else %}<image>{% endif %}{% endfor %}{% endfor %}{% if add_generation_prompt %}>{% endif %}"
)


def idefics3_tokenizer():
    tokenizer = char_tokenizer(TEMPLATE)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>", "\n", *MARKERS]})
    return tokenizer


def tiny_idefics3(seed: int = 0) -> Idefics3ForConditionalGeneration:
    tokenizer = idefics3_tokenizer()
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  image_size=TILE, patch_size=14)  # fmt: skip
    text = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=512, bos_token_id=1, eos_token_id=2,
                pad_token_id=0)  # fmt: skip
    config = Idefics3Config(vision_config=vision, text_config=text, scale_factor=2,
                            image_token_id=tokenizer.convert_tokens_to_ids("<image>"))  # fmt: skip
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model


def idefics3_processor() -> Idefics3Processor:
    images = Idefics3ImageProcessorPil(size={"longest_edge": 2 * TILE}, max_image_size={"longest_edge": TILE},
                                       do_image_splitting=True)  # fmt: skip
    return Idefics3Processor(image_processor=images, tokenizer=idefics3_tokenizer(), image_seq_len=1,
                             chat_template=TEMPLATE)  # fmt: skip
