"""Model-specific attention features in the torch reference, against the models' own eager attention.

Sinks: gpt-oss's `eager_attention_forward` (each head's sink logit in the softmax). Narrow V: MLA models
(DeepSeek, MiniCPM3) produce V with a smaller head size than K; the output takes V's.
"""

from __future__ import annotations

import torch
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward as gpt_oss_attention

from rollout.ops import paged_attention_ref as ref
from tests.ops.conftest import dense_attention, make_paged_batch

MIXED = ([17, 6, 30, 2], [1, 6, 5, 1])
PREFILL = ([9, 20, 13], [3, 20, 8])


class _SinkModule(torch.nn.Module):
    def __init__(self, sinks: torch.Tensor, groups: int) -> None:
        super().__init__()
        self.sinks = torch.nn.Parameter(sinks)
        self.num_key_value_groups = groups


def _gpt_oss_oracle(batch, scale: float, sinks: torch.Tensor) -> torch.Tensor:
    module = _SinkModule(sinks, batch.query.shape[1] // batch.keys[0].shape[1]).eval()
    outs, start = [], 0
    for s, seq_len in enumerate(batch.meta.seq_lens_cpu):
        q_len = batch.meta.query_lens_cpu[s]
        q = batch.query[start : start + q_len].transpose(0, 1)[None]
        k, v = (t.transpose(0, 1)[None] for t in (batch.keys[s], batch.values[s]))
        q_pos = torch.arange(seq_len - q_len, seq_len)[:, None]
        mask = torch.zeros(q_len, seq_len).masked_fill(torch.arange(seq_len)[None] > q_pos, float("-inf"))
        with torch.no_grad():
            outs.append(gpt_oss_attention(module, q, k, v, mask[None, None], scaling=scale)[0][0])
        start += q_len
    return torch.cat(outs)


def test_reference_sinks_match_gpt_oss_eager_attention() -> None:
    sinks = torch.tensor([3.0, -1.0, 0.5, 8.0])
    for case in (MIXED, PREFILL):
        batch = make_paged_batch(*case, num_heads=4, num_kv_heads=2, seed=4)
        for tile_blocks in (2, ref.DEFAULT_TILE_BLOCKS):
            out = ref.paged_attention(
                batch.query,
                batch.key_cache,
                batch.value_cache,
                batch.meta,
                0.25,
                tile_blocks=tile_blocks,
                sinks=sinks,
            )
            torch.testing.assert_close(out, _gpt_oss_oracle(batch, 0.25, sinks), atol=1e-5, rtol=1e-5)


def test_reference_output_takes_the_value_head_size() -> None:
    batch = make_paged_batch(*MIXED, head_dim=16, seed=6)
    narrow = batch.value_cache[..., :12].contiguous()
    out = ref.paged_attention(batch.query, batch.key_cache, narrow, batch.meta, 0.25)
    expected = dense_attention(batch, 0.25)[..., :12]  # V's columns are independent in attention
    assert out.shape[-1] == 12
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_reference_chunked_attention_sees_only_the_query_chunk() -> None:
    """Llama 4's local layers: keys of the query's own chunk (k // c == q // c), causal inside it."""
    for case in (MIXED, PREFILL):
        batch = make_paged_batch(*case, num_heads=4, num_kv_heads=2, seed=8)
        for tile_blocks in (2, ref.DEFAULT_TILE_BLOCKS):
            args = (batch.query, batch.key_cache, batch.value_cache, batch.meta, 0.25)
            out = ref.paged_attention(*args, tile_blocks=tile_blocks, chunk_size=8)
            torch.testing.assert_close(out, dense_attention(batch, 0.25, chunk_size=8), atol=1e-5, rtol=1e-5)
            assert not torch.allclose(out, dense_attention(batch, 0.25), atol=1e-3)  # the chunks bite
