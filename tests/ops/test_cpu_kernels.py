"""The compiled CPU kernels: they build wherever a C++ compiler is found; the decode kernel reads the
paged cache exactly as the reference does (GQA, windows, chunks, narrower V, empty rows); the noise
kernel gives the torch path's bits; both can be switched off."""

from __future__ import annotations

import shutil

import pytest
import torch

from rollout.engine.sample.sampling_noise import row_state, sample_key, stream_bits, uniforms
from rollout.ops import cpu_kernels
from rollout.ops import paged_attention_ref as ref
from rollout.ops.cpu_kernels import load_cpu_kernels
from rollout.ops.cpu_paged_decode import DecodeRows, decode_attention

needs_compiler = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


@needs_compiler
def test_the_kernels_build_where_a_compiler_is_found() -> None:
    assert load_cpu_kernels() is not None


def test_the_environment_switch_turns_them_off(monkeypatch) -> None:
    monkeypatch.setenv(cpu_kernels.DISABLE_ENV, "0")
    assert load_cpu_kernels.__wrapped__() is None


@needs_compiler
@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(8, 2), (4, 4), (6, 1)])
@pytest.mark.parametrize(
    "masking", [{}, dict(sliding_window=6), dict(chunk_size=8), dict(sliding_window=3, chunk_size=8)], ids=str
)
@pytest.mark.parametrize(
    ("head_dim", "block_size"), [(24, 16), (32, 16), (64, 16), (96, 16), (128, 16), (256, 16), (64, 5)]
)
def test_decode_rows_equal_the_reference(
    paged_batch, num_heads: int, num_kv_heads: int, masking: dict, head_dim: int, block_size: int
) -> None:
    """Head sizes 32, 64, 96, 128 and 256 take the register-tiled path (eight keys per reduction), 24 the
    generic one; block size 5 makes runs of keys shorter than a tile."""
    batch = paged_batch(
        [1, 9, 16, 33, 70],
        [1] * 5,
        num_heads,
        num_kv_heads,
        head_dim=head_dim,
        block_size=block_size,
        seed=num_heads,
    )
    args = (batch.query, batch.key_cache, batch.value_cache)
    plan = DecodeRows(None, batch.meta.block_tables, batch.meta.seq_lens.long())
    masks = (masking.get("sliding_window"), masking.get("chunk_size"))
    out = decode_attention(load_cpu_kernels(), *args, plan, 0.3, masks)
    torch.testing.assert_close(
        out, ref.paged_attention(*args, batch.meta, 0.3, **masking), atol=1e-5, rtol=1e-5
    )


@needs_compiler
def test_a_narrower_value_head_and_empty_rows(paged_batch) -> None:
    """MLA's V is narrower than K (the engine pads V's cache); a length-0 row attends to nothing."""
    batch = paged_batch([12, 30, 5], [1, 1, 1], head_dim=16, seed=2)
    value_cache = batch.value_cache[..., :8].contiguous()
    plan = DecodeRows(None, batch.meta.block_tables, torch.tensor([12, 0, 5]))
    out = decode_attention(
        load_cpu_kernels(), batch.query, batch.key_cache, value_cache, plan, 0.25, (None, None)
    )
    expected = ref.paged_attention(batch.query, batch.key_cache, value_cache, batch.meta, 0.25)
    torch.testing.assert_close(out[[0, 2]], expected[[0, 2]], atol=1e-5, rtol=1e-5)
    assert torch.equal(out[1], torch.zeros_like(out[1]))


@needs_compiler
def test_the_noise_kernel_gives_the_torch_paths_bits() -> None:
    """Seeded samples must not depend on whether this machine could build the kernels."""
    keys = [sample_key(seed, i) for seed in (0, 1, 2**70 + 5) for i in range(3)]
    states = [row_state(key, position) for key in keys for position in (0, 1, 977)] + [0, 2**64 - 1]
    signed = torch.tensor([s - (1 << 64) if s >= 1 << 63 else s for s in states], dtype=torch.int64)
    vocab = 5003
    fast = torch.empty(len(states), vocab)
    load_cpu_kernels().uniform_noise(fast, signed)
    slow = uniforms(stream_bits(states, vocab, torch.device("cpu")), torch.empty(len(states), vocab))
    assert torch.equal(fast, slow)
    assert fast.min() > 0 and fast.max() < 1


def test_without_a_compiler_the_kernels_say_so_in_one_line(tmp_path, monkeypatch, caplog) -> None:
    """The torch paths serve instead, and the failure is said once, in one line (it was 15)."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    assert load_cpu_kernels.__wrapped__() is None
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2  # "building ...", then why it failed
    assert "CPU kernels unavailable" in warnings[1] and "\n" not in warnings[1]
