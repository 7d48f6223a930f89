"""Zamba2's shared transformer block: each depth's attention module keeps its own layer's KV."""

from __future__ import annotations

import pytest
import torch

from rollout.engine.model.shared_attention import index_shared_attention
from tests.models.zoo import HYBRID, build

ZAMBA2 = next(f for f in HYBRID if f.model_type == "zamba2")


def test_each_depth_of_the_shared_block_takes_its_decoder_layers_index() -> None:
    model = build(ZAMBA2)
    attentions = {
        i: layer.shared_transformer.self_attn for i, layer in enumerate(model.model.layers) if i in (1, 3, 4)
    }
    assert {a.layer_idx for a in attentions.values()} == {-1}  # transformers passes the layer at call time
    assert index_shared_attention(model) == 3
    assert {i: a.layer_idx for i, a in attentions.items()} == {1: 1, 3: 3, 4: 4}
    assert attentions[1].q_proj.weight is attentions[4].q_proj.weight  # one block's weights, two KVs


def test_a_call_as_another_layer_is_refused() -> None:
    model = build(ZAMBA2)
    index_shared_attention(model)
    attention = model.model.layers[1].shared_transformer.self_attn
    with pytest.raises(ValueError, match="of layer 1 was called as layer 4"):
        attention(hidden_states=torch.zeros(1, 2, 128), layer_idx=4)
