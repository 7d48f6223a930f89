"""The fast CPU path (one gather + one fused SDPA call per group, decode rows through the compiled
kernel when it is built) equals the torch reference on ragged batches, with and without the kernel,
and hands every feature it lacks to the reference."""

from __future__ import annotations

import pytest
import torch

from rollout.ops import paged_attention_ref as ref
from rollout.ops import paged_attention_sdpa
from rollout.ops.backends import get_backend
from rollout.ops.cpu_kernels import load_cpu_kernels
from rollout.ops.paged_attention_sdpa import SdpaPagedAttention

CASES = {
    "decode": ([1, 5, 37, 70], [1, 1, 1, 1]),
    "prefill": ([9, 20, 13], [3, 20, 8]),  # chunks after cached context, and a whole prompt
    "mixed": ([17, 6, 30, 2, 41], [1, 6, 5, 1, 1]),
}


def both(batch, kernel: bool = False, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    args = (batch.query, batch.key_cache, batch.value_cache, batch.meta, 0.25)
    attention = SdpaPagedAttention(load_cpu_kernels() if kernel else None)
    return attention(*args, **kwargs), ref.paged_attention(*args, **kwargs)


@pytest.mark.parametrize("kernel", [False, True], ids=["sdpa", "kernel"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 1), (4, 2), (2, 2)])
def test_sdpa_path_equals_the_reference(
    paged_batch, case: str, num_heads: int, num_kv_heads: int, kernel: bool
) -> None:
    batch = paged_batch(*CASES[case], num_heads=num_heads, num_kv_heads=num_kv_heads, seed=num_kv_heads)
    fast, reference = both(batch, kernel)
    torch.testing.assert_close(fast, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel", [False, True], ids=["sdpa", "kernel"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(
    "masking", [dict(sliding_window=5), dict(chunk_size=8), dict(sliding_window=5, chunk_size=8)], ids=str
)
def test_sdpa_path_honours_sliding_windows_and_chunks(
    paged_batch, case: str, masking: dict, kernel: bool
) -> None:
    batch = paged_batch(*CASES[case], seed=7)
    fast, reference = both(batch, kernel, **masking)
    torch.testing.assert_close(fast, reference, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(fast, both(batch, kernel)[0])  # the mask bites here


def test_one_plan_serves_layers_with_different_windows_and_a_new_batch_replans(paged_batch) -> None:
    """Layers share the step's metadata object: the plan is reused, masks are kept per window."""
    attention = SdpaPagedAttention()
    first, second = paged_batch(*CASES["mixed"], seed=1), paged_batch(*CASES["prefill"], seed=2)
    for batch in (first, second, first):
        for window in (None, 4, None):
            args = (batch.query, batch.key_cache, batch.value_cache, batch.meta, 0.25)
            torch.testing.assert_close(
                attention(*args, sliding_window=window),
                ref.paged_attention(*args, sliding_window=window),
                atol=1e-5,
                rtol=1e-5,
            )


@pytest.mark.parametrize("case", CASES)
def test_softcap_is_delegated_to_the_reference(paged_batch, case: str) -> None:
    fast, reference = both(paged_batch(*CASES[case], seed=11), softcap=2.0)
    assert torch.equal(fast, reference)


def test_a_feature_this_path_lacks_goes_to_the_reference_and_none_stays_fast(
    paged_batch, monkeypatch
) -> None:
    """A newer bridge passes extra keyword features (attention sinks, chunked local attention...):
    any with a value runs on the reference, which implements them; None means the feature is off."""
    calls, original = [], ref.paged_attention

    def reference(*args, **kwargs):
        calls.append(kwargs)
        return original(*args[:7])

    monkeypatch.setattr(paged_attention_sdpa.paged_attention_ref, "paged_attention", reference)
    batch = paged_batch(*CASES["mixed"], seed=3)
    args = (batch.query, batch.key_cache, batch.value_cache, batch.meta, 0.25)
    SdpaPagedAttention()(*args, sinks=None, chunk_size=None)
    SdpaPagedAttention()(*args, chunk_size=4)  # implemented here: stays on the fast path
    assert calls == []
    SdpaPagedAttention()(*args, sinks=torch.zeros(4))
    assert len(calls) == 1 and "sinks" in calls[0]


@pytest.mark.parametrize("kernel", [False, True], ids=["sdpa", "kernel"])
def test_bfloat16_cache_matches_the_reference(paged_batch, kernel: bool) -> None:
    """The kernel serves fp32 only: a bf16 cache takes SDPA whether or not the kernel exists."""
    batch = paged_batch(*CASES["mixed"], dtype=torch.bfloat16, seed=5)
    fast, reference = both(batch, kernel)
    torch.testing.assert_close(fast.float(), reference.float(), atol=2e-2, rtol=2e-2)


def test_cpu_default_is_the_sdpa_path_and_torch_names_the_reference() -> None:
    cpu = torch.device("cpu")
    assert isinstance(get_backend("auto", cpu).paged_attention, SdpaPagedAttention)
    assert isinstance(get_backend("sdpa", cpu).paged_attention, SdpaPagedAttention)
    assert get_backend("torch", cpu).paged_attention is ref.paged_attention
