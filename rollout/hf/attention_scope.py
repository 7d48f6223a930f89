"""Which of a model's attention modules the engine's paged attention serves: the language model's only.

An image-text-to-text model holds a vision encoder whose attention is bidirectional over one image and keeps
no KV; transformers lets each sub-config have its own implementation, so the language model gets the paged
bridge and the vision tower SDPA (eager when the tower has no SDPA path), exactly as transformers runs it.
"""

from __future__ import annotations

from transformers import PreTrainedModel

from rollout.hf.attention import ATTN_IMPLEMENTATION


def engine_attention(model: PreTrainedModel, vision: str = "sdpa") -> str | dict[str, str]:
    """The `set_attn_implementation` argument that puts the engine's attention where it belongs."""
    sub_configs = getattr(model.config, "sub_configs", None) or {}
    if "text_config" not in sub_configs or "vision_config" not in sub_configs:
        return ATTN_IMPLEMENTATION
    return {
        name: ATTN_IMPLEMENTATION if name == "text_config" else vision
        for name in sub_configs
        if getattr(model.config, name, None) is not None
    }


def set_engine_attention(model: PreTrainedModel) -> None:
    """Switches `model` to the engine's attention; a vision tower without SDPA keeps transformers' eager."""
    try:
        model.set_attn_implementation(engine_attention(model))
    except ValueError:  # the tower does not implement SDPA
        model.set_attn_implementation(engine_attention(model, vision="eager"))


def uses_engine_attention(model: PreTrainedModel) -> bool:
    return model.config.get_text_config()._attn_implementation == ATTN_IMPLEMENTATION
