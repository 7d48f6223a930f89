"""The model zoo: one tiny config per model family the engine serves, and one per family it refuses.

Each entry builds a fresh config (the engine switches the attention implementation in place).
`scripts/gen_models_doc.py` writes docs/models.md from these lists.
"""

from __future__ import annotations

import torch
import transformers as tf
from transformers import AutoModelForCausalLM, PreTrainedModel

from tests.models.zoo_family import _BASE, VOCAB, Family, _cfg
from tests.models.zoo_hybrid import HYBRID

__all__ = ["HYBRID", "REFUSED", "SUPPORTED", "VOCAB", "Family", "_BASE", "_cfg", "build"]

_MLA = dict(
    q_lora_rank=None,
    kv_lora_rank=16,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=12,
    head_dim=8,
    first_k_dense_replace=2,
    n_routed_experts=4,
    num_key_value_heads=4,
)

SUPPORTED: tuple[Family, ...] = (
    Family("llama", _cfg(tf.LlamaConfig), "grouped-query attention"),
    Family("qwen2", _cfg(tf.Qwen2Config), "q/k/v biases"),
    Family("qwen3", _cfg(tf.Qwen3Config, head_dim=16), "q/k norms"),
    Family("mistral", _cfg(tf.MistralConfig, sliding_window=None), "Llama-like"),
    Family("mixtral", _cfg(tf.MixtralConfig, num_local_experts=4, sliding_window=None), "mixture of experts"),
    Family(
        "qwen2_moe",
        _cfg(tf.Qwen2MoeConfig, num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=32),
        "shared expert",
    ),
    Family("phi3", _cfg(tf.Phi3Config), "fused qkv projection"),
    Family(
        "gpt2",
        lambda: tf.GPT2Config(
            vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=256, bos_token_id=1, eos_token_id=2
        ),
        "learned positions, Conv1D",
    ),
    Family("gemma2", _cfg(tf.Gemma2Config, head_dim=16, sliding_window=8), "sliding window, softcap"),
    Family("gemma3_text", _cfg(tf.Gemma3TextConfig, head_dim=16, sliding_window=8), "sliding window"),
    Family("stablelm", _cfg(tf.StableLmConfig), "layers that drop **kwargs"),
    Family("nemotron", _cfg(tf.NemotronConfig, head_dim=16), "layers that drop **kwargs"),
    Family(
        "gpt_oss",
        _cfg(
            tf.GptOssConfig,
            head_dim=16,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"],
        ),
        "attention sinks",
    ),
    Family("deepseek_v3", _cfg(tf.DeepseekV3Config, **_MLA), "MLA: K and V head sizes differ"),
    Family("deepseek_v2", _cfg(tf.DeepseekV2Config, **_MLA), "MLA"),
    Family(
        "minicpm3",
        _cfg(
            tf.MiniCPM3Config,
            q_lora_rank=None,
            kv_lora_rank=16,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=12,
            num_key_value_heads=4,
        ),
        "MLA",
    ),
    Family(
        "gemma4_text",
        _cfg(
            tf.Gemma4TextConfig,
            head_dim=16,
            global_head_dim=32,
            sliding_window=8,
            vocab_size_per_layer_input=VOCAB,
            hidden_size_per_layer_input=16,
        ),
        "per-layer head sizes",
    ),
    Family("jetmoe", _cfg(tf.JetMoeConfig, kv_channels=16), "K/V repeated before attention"),
    Family(
        "llama4_text",
        # layer 0: RoPE + chunks of 8; layer 1: NoPE, global, queries scaled by position (floor_scale 2)
        _cfg(
            tf.Llama4TextConfig,
            head_dim=16,
            attention_chunk_size=8,
            no_rope_layers=[1, 0],
            floor_scale=2,
            attn_scale=0.5,
        ),
        "chunked local attention, temperature tuning",
    ),
)

SUPPORTED = SUPPORTED + HYBRID

REFUSED: tuple[Family, ...] = (
    # RoBERTa numbers positions from padding_idx + 1 when given none; the engine passes token indices
    Family("roberta", _cfg(tf.RobertaConfig, is_decoder=True), "the cause is positions"),
    Family(
        "bart",
        lambda: tf.BartConfig(
            vocab_size=VOCAB,
            d_model=64,
            decoder_layers=2,
            decoder_attention_heads=4,
            decoder_ffn_dim=96,
            encoder_layers=2,
            encoder_attention_heads=4,
            encoder_ffn_dim=96,
            max_position_embeddings=256,
        ),
        "it starts in model.decoder.embed_positions (BartLearnedPositionalEmbedding)",
    ),
    Family(
        "hrm_text",  # two stacks of 2 layers whose attention modules share layer_idx 0 and 1 (a call adds its cycle)
        lambda: tf.HrmTextConfig(
            vocab_size=VOCAB,
            hidden_size=64,
            num_attention_heads=4,
            head_dim=16,
            intermediate_size=96,
            num_hidden_layers=2,
            H_cycles=1,
            L_cycles=1,
            L_bp_cycles=[1],
            max_position_embeddings=256,
        ),
        "layer index(es) held by several attention modules",
    ),
    Family("diffllama", _cfg(tf.DiffLlamaConfig), "calls attention 2 times in layer 0"),
    Family(
        "falcon",
        _cfg(tf.FalconConfig, new_decoder_architecture=True),
        "does not support transformers' attention interface",
    ),
    Family(
        "deepseek_v32",
        _cfg(tf.DeepseekV32Config, **{**_MLA, "q_lora_rank": 16}),
        "fails in a forward without a dense attention mask",
    ),
    Family(
        "deepseek_v4",
        _cfg(
            tf.DeepseekV4Config,
            layer_types=["compressed_sparse_attention", "heavily_compressed_attention"],
            compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
        ),
        "key/value rows for",  # compressed entries appended to the keys: one row per token no longer holds
    ),
    Family(
        "minimax",
        _cfg(
            tf.MiniMaxConfig,
            head_dim=16,
            num_local_experts=4,
            num_experts_per_tok=2,
            layer_types=["linear_attention", "full_attention"],
            block_size=16,
        ),
        "keep state between steps (model.layers.0.self_attn: MiniMaxLightningAttention)",
    ),
    Family(
        "recurrent_gemma",
        lambda: tf.RecurrentGemmaConfig(
            vocab_size=VOCAB,
            hidden_size=64,
            intermediate_size=96,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=1,
            lru_width=64,
            attention_window_size=16,
        ),
        "(model.layers.0.temporal_block: RecurrentGemmaRecurrentBlock): it keeps its convolution window and "
        "RG-LRU state as module attributes",
    ),
)


def build(family: Family, seed: int = 0) -> PreTrainedModel:
    """Random fp32 weights; a larger output scale makes greedy choices unambiguous."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(family.make_config()).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
        if family.tune is not None:
            family.tune(model)
    return model
