"""The zoo's hybrid families: recurrent layers (Mamba, Mamba2, Gated DeltaNet, ...) beside attention, with the
weight tuning that keeps their states in a range where fp32 comparisons mean something (tests/models/zoo.py)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import transformers as tf
from transformers import PreTrainedModel

from tests.models.zoo_family import VOCAB, Family, _cfg

_HYBRID_LAYERS = dict(num_hidden_layers=4, max_position_embeddings=256)
_SHARED_EXPERT_MOE = dict(
    num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32
)
_GATED_DELTA = dict(
    head_dim=16,
    linear_num_value_heads=4,
    linear_num_key_heads=2,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
)


def _unit_gain(classes: tuple[str, ...], layers: tuple[str, ...]) -> Callable[[PreTrainedModel], None]:
    """Re-initialises `layers` of every module of `classes` at unit gain (std 1/sqrt(fan_in))."""

    def tune(model: PreTrainedModel) -> None:
        for module in model.modules():
            if type(module).__name__ in classes:
                for name in layers:
                    layer = getattr(module, name)
                    layer.weight.normal_(0.0, layer.weight[0].numel() ** -0.5)

    return tune


# The zoo's random weights must let each kind of state reach the logits, or the exactness tests would pass
# with it wrong (test_hybrid_models.py corrupts each kind alone and needs the logprobs to move by > 1e-3).
# Mamba, Falcon-Mamba, Mamba-2 (the mixers are the whole model), Kimi-Linear and Bailing-hybrid need no tune.

# LFM2's short-conv block multiplies three 0.02-std projections and a 0.02-std convolution: at that init its
# output, so its conv state, barely reaches the logits (halving every conv state moved them by 4e-5).
_LFM2_STATES = _unit_gain(("Lfm2ShortConv", "Lfm2MoeShortConv"), ("in_proj", "conv", "out_proj"))


def _slow_gated_deltanet(model: PreTrainedModel) -> None:
    """Gated DeltaNet draws each head's decay rate A in [0.01, 16]: most heads forget their state within a
    token (halving it moved Qwen3-Next's logprobs by 3e-6). A in [0.01, 0.2] keeps it for tens of tokens."""
    for module in model.modules():
        if type(module).__name__.endswith("GatedDeltaNet"):
            module.A_log.copy_(torch.empty_like(module.A_log).uniform_(0.01, 0.2).log())


def _mamba2_state_path(mixer: str) -> Callable[[PreTrainedModel], None]:
    """A Mamba2 mixer's output is C.h + D.x, with x, B and C from 0.02-std projections: C.h is a product of
    small weights and D.x outweighs it (halving the SSM states moved Bamba's logprobs by 2e-6). Unit-gain
    input projection and convolution make C.h dominate, with dt_bias 1 (Bamba's init). A mixer that clamps
    dt to time_step_min in its chunked scan and not in its one-token update (Nemotron-H, Zamba2) gets every
    other head's dt_bias at softplus's preimage of that minimum, so about half of those heads' tokens fall
    under it: transformers' two paths then differ by 6e-3 (Nemotron-H) and 1.3e-2 (Zamba2) in logprobs, and
    the engine must decode as the full forward does (rollout/engine/hybrid/time_step_clamp.py)."""
    unit_gain = _unit_gain((mixer,), ("in_proj", "conv1d"))

    def tune(model: PreTrainedModel) -> None:
        unit_gain(model)
        for module in model.modules():
            if type(module).__name__ == mixer:
                module.dt_bias.fill_(1.0)
                low = float(getattr(module, "time_step_limit", (0.0,))[0])
                if low > 0:
                    module.dt_bias[1::2] = low + math.log(-math.expm1(-low))

    return tune


# Jamba's Mamba mixer: y = C.h + D.x with B, C, dt from small projections of a 0.02-std input projection,
# so D.x outweighs the state (halving it moved the logprobs by 1e-4). Unit gain makes C.h count.
_JAMBA_STATES = _unit_gain(("JambaMambaMixer",), ("in_proj", "conv1d"))


def _zaya_states(model: PreTrainedModel) -> None:
    """ZAYA's key scale `temp` starts at 0: keys are zero, every attention row uniform, so the convolved queries
    and keys (and the conv state they come from) never reach the logits. Scale 1, and unit-gain convolutions
    so that their output is not swamped by the q/k residual projections."""
    _unit_gain(("ZayaCCAProjection",), ("conv_qk_depthwise", "conv_qk_grouped"))(model)
    for module in model.modules():
        if type(module).__name__ == "ZayaQKNorm":
            module.temp.fill_(1.0)


_MAMBA2 = dict(mamba_n_heads=4, mamba_d_head=32, mamba_d_state=8, mamba_n_groups=1, mamba_chunk_size=16)

HYBRID: tuple[Family, ...] = (
    Family(
        "lfm2",
        _cfg(
            tf.Lfm2Config, **_HYBRID_LAYERS, layer_types=["conv", "full_attention", "conv", "full_attention"]
        ),
        "hybrid: short convolutions",
        _LFM2_STATES,
    ),
    Family(
        "qwen3_next",
        _cfg(
            tf.Qwen3NextConfig,
            **_HYBRID_LAYERS,
            **_GATED_DELTA,
            **_SHARED_EXPERT_MOE,
        ),
        "hybrid: Gated DeltaNet, MoE",
        _slow_gated_deltanet,
    ),
    Family(
        "qwen3_5_text",
        _cfg(tf.Qwen3_5TextConfig, **_HYBRID_LAYERS, **_GATED_DELTA),
        "hybrid: Gated DeltaNet",
        _slow_gated_deltanet,
    ),
    Family(
        "qwen3_5_moe_text",
        _cfg(
            tf.Qwen3_5MoeTextConfig,
            **_HYBRID_LAYERS,
            **_GATED_DELTA,
            **_SHARED_EXPERT_MOE,
        ),
        "hybrid: Gated DeltaNet, MoE",
        _slow_gated_deltanet,
    ),
    Family(
        "lfm2_moe",
        _cfg(
            tf.Lfm2MoeConfig,
            **_HYBRID_LAYERS,
            layer_types=["conv", "full_attention", "conv", "full_attention"],
            num_dense_layers=1,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
        ),
        "hybrid: short convolutions, MoE",
        _LFM2_STATES,
    ),
    Family(
        "jamba",
        _cfg(
            tf.JambaConfig,
            **_HYBRID_LAYERS,
            attn_layer_period=2,
            attn_layer_offset=1,
            num_experts=4,
            mamba_dt_rank=8,
            use_mamba_kernels=False,
        ),
        "hybrid: Mamba (continued chunks token by token), MoE",
        _JAMBA_STATES,
    ),
    Family(
        "bamba",
        _cfg(tf.BambaConfig, **_HYBRID_LAYERS, attn_layer_indices=[1, 3], **_MAMBA2),
        "hybrid: Mamba2",
        _mamba2_state_path("BambaMixer"),
    ),
    Family(
        "granitemoehybrid",
        _cfg(
            tf.GraniteMoeHybridConfig,
            **_HYBRID_LAYERS,
            layer_types=["mamba", "attention", "mamba", "attention"],
            num_local_experts=4,
            **_MAMBA2,
        ),
        "hybrid: Mamba2, MoE (Granite 4)",
        _mamba2_state_path("GraniteMoeHybridMambaLayer"),
    ),
    Family(
        "falcon_h1",
        _cfg(tf.FalconH1Config, mamba_d_ssm=128, head_dim=16, **_MAMBA2),
        "hybrid: Mamba2 beside attention in every layer",
        _mamba2_state_path("FalconH1Mixer"),
    ),
    Family(
        "nemotron_h",
        _cfg(
            tf.NemotronHConfig,
            head_dim=16,
            layers_block_type=["mamba", "moe", "attention", "mlp"],
            mamba_num_heads=8,
            mamba_head_dim=16,
            ssm_state_size=8,
            n_groups=1,
            chunk_size=16,
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            moe_shared_expert_intermediate_size=32,
        ),
        "hybrid: Mamba2, MoE-only and MLP-only layers",
        _mamba2_state_path("NemotronHMamba2Mixer"),
    ),
    Family(
        "mamba2",
        lambda: tf.Mamba2Config(
            vocab_size=VOCAB,
            hidden_size=64,
            num_hidden_layers=2,
            num_heads=4,
            head_dim=32,
            state_size=8,
            n_groups=1,
            chunk_size=16,
        ),
        "recurrent: Mamba2, no attention layer",
    ),
    Family(
        "mamba",
        # untied: a tied random model's logits pick the input token (embedding . itself) at any temperature
        lambda: tf.MambaConfig(
            vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, state_size=8, tie_word_embeddings=False
        ),
        "recurrent: Mamba (continued chunks token by token)",
    ),
    Family(
        "falcon_mamba",
        # untied: a tied random model's logits pick the input token (embedding . itself) at any temperature
        lambda: tf.FalconMambaConfig(
            vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, state_size=8, tie_word_embeddings=False
        ),
        "recurrent: Mamba with B/C/dt norms (continued chunks token by token)",
    ),
    Family(
        "kimi_linear",
        _cfg(
            tf.KimiLinearConfig,
            **_HYBRID_LAYERS,
            q_lora_rank=None,
            kv_lora_rank=16,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=12,
            num_key_value_heads=4,
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
            linear_attn_config={"head_dim": 16, "num_heads": 4, "short_conv_kernel_size": 4},
            num_local_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
        ),
        "hybrid: Kimi Delta Attention, MLA, MoE",
    ),
    Family(
        "zamba2",
        _cfg(
            tf.Zamba2Config,
            num_hidden_layers=5,
            num_key_value_heads=4,  # transformers' adapters add full-width K/V: grouped K/V fails in its own forward
            # layers 1 and 4 run one shared block (tied weights), each with its own KV and adapters
            layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid"],
            num_mem_blocks=2,
            use_shared_attention_adapter=True,
            adapter_rank=8,
            use_mem_rope=True,
            n_mamba_heads=4,
            mamba_d_state=8,
            chunk_size=16,
        ),
        "hybrid: Mamba2, a shared attention block reused at several depths",
        _mamba2_state_path("Zamba2MambaMixer"),
    ),
    Family(
        "zaya",
        _cfg(
            tf.ZayaConfig,
            **_HYBRID_LAYERS,
            head_dim=16,
            layer_types=["hybrid", "hybrid_sliding", "hybrid", "hybrid_sliding"],
            sliding_window=8,
            num_experts=4,
            moe_intermediate_size=32,
            router_hidden_size=16,
        ),
        "hybrid: convolved queries and keys, delayed values (state beside the KV), sliding window, MoE",
        _zaya_states,
    ),
    Family(
        "bailing_hybrid",
        _cfg(
            tf.BailingHybridConfig,
            **_HYBRID_LAYERS,
            head_dim=16,  # the linear layers' head size (the MLA one is qk_rope_head_dim)
            q_lora_rank=None,
            kv_lora_rank=16,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=12,
            num_key_value_heads=4,
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
            first_k_dense_replace=1,
            num_local_experts=4,
            num_experts_per_tok=2,
            n_group=1,
            topk_group=1,
            moe_intermediate_size=32,
        ),
        "hybrid: Kimi-style delta attention, MLA, MoE",
    ),
)
