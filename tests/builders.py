"""Builders for tests: tiny Hugging Face models from configs with fixed seeds, and engines over them.

Each call builds a fresh config object, since the engine switches its model's attention
implementation in the config and a reference model must not share it.
"""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

from rollout import LLM, EngineConfig

VOCAB = 128
ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral", "gpt2")

_COMMON = dict(
    vocab_size=VOCAB,
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


def tiny_config(arch: str = "llama", **overrides: object):
    if arch == "llama":
        return LlamaConfig(**{**_COMMON, **overrides})
    if arch == "qwen2":
        return Qwen2Config(**{**_COMMON, **overrides})
    if arch == "qwen3":
        return Qwen3Config(**{**_COMMON, "head_dim": 16, **overrides})
    if arch == "qwen3_moe":
        moe = dict(head_dim=16, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
        return Qwen3MoeConfig(**{**_COMMON, **moe, **overrides})
    if arch == "mistral":
        return MistralConfig(**{**_COMMON, "sliding_window": None, **overrides})
    if arch == "gpt2":
        gpt2 = dict(
            vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=512, bos_token_id=1, eos_token_id=2
        )
        return GPT2Config(**{**gpt2, **overrides})
    raise ValueError(f"unknown architecture {arch!r}")


_CLASSES = {
    "llama": LlamaForCausalLM,
    "qwen2": Qwen2ForCausalLM,
    "qwen3": Qwen3ForCausalLM,
    "qwen3_moe": Qwen3MoeForCausalLM,
    "mistral": MistralForCausalLM,
    "gpt2": GPT2LMHeadModel,
}


def tiny_model(arch: str = "llama", seed: int = 0, **overrides: object) -> PreTrainedModel:
    """A randomly initialized fp32 model; the same (arch, seed, overrides) gives the same weights."""
    torch.manual_seed(seed)
    model = _CLASSES[arch](tiny_config(arch, **overrides)).eval()
    # random init gives near-uniform logits; a larger output scale makes greedy choices unambiguous
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model


def reference_copy(model: PreTrainedModel) -> PreTrainedModel:
    """An independent model with the same weights, for transformers' own generate/forward."""
    arch = next(a for a, cls in _CLASSES.items() if isinstance(model, cls))
    overrides = {k: v for k, v in model.config.to_diff_dict().items() if k in model.config.to_dict()}
    clone = _CLASSES[arch](type(model.config).from_dict(overrides)).eval()
    clone.load_state_dict(model.state_dict())
    clone.set_attn_implementation("eager")
    return clone


def tiny_llm(
    arch: str = "llama", seed: int = 0, model_overrides: dict | None = None, **config: object
) -> LLM:
    config.setdefault("num_blocks", 256)
    return LLM(model=tiny_model(arch, seed, **(model_overrides or {})), config=EngineConfig(**config))


def random_prompts(count: int, min_len: int, max_len: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (count,), generator=g).tolist()
    # ids 3.. avoid bos/eos/pad so prompts never contain a stop token
    return [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in lengths]


def char_tokenizer(chat_template: str | None = None) -> PreTrainedTokenizerFast:
    """A character-level tokenizer (ids 3.. are characters) that fits the tiny model's vocabulary."""
    chars = "abcdefghijklmnopqrstuvwxyz <>/"
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>")
    tokenizer.chat_template = chat_template
    return tokenizer


# Renders what real chat templates read beyond role and string content: tools, tool calls, tool
# results (tool_call_id), names, lists of content parts, reasoning. Starts with the BOS token, as
# Llama-style templates do; the tokenizer's post-processor adds its own BOS to plain text.
TOOL_CHAT_TEMPLATE = (
    "{{ bos_token }}{% if tools %}<tools>{{ tools | tojson }}</tools>{% endif %}"
    "{% for m in messages %}<{{ m.role }}{% if m.name %}|{{ m.name }}{% endif %}"
    "{% if m.tool_call_id %}|{{ m.tool_call_id }}{% endif %}>"
    "{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
    "{% if m.content is string %}{{ m.content }}"
    "{% elif m.content %}{% for part in m.content %}{{ part.text }}{% endfor %}{% endif %}"
    "{% for call in m.tool_calls or [] %}<call>{{ call.function.name }}{{ call.function.arguments | tojson }}"
    "</call>{% endfor %}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def tool_chat_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer (ids 3..) that adds a BOS to text and has TOOL_CHAT_TEMPLATE."""
    chars = string.ascii_letters + string.digits + " <>/{}[]\":,._-|()=?!'\n"
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    assert len(vocab) <= VOCAB
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    return tokenizer


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
TOOL_CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
# Every shape chat templates take: a name, a list of content parts, an assistant turn with no
# content but reasoning and a tool call, a tool result.
CONVERSATION = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "name": "ann", "content": [{"type": "text", "text": "weather in Paris?"}]},
    {"role": "assistant", "content": None, "reasoning_content": "need a tool", "tool_calls": [TOOL_CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]
