"""The CPU fast path: the fused kernels equal transformers' ops; a module is fused only where its own
forward is reproduced; outside the engine a fused model is the model transformers defines; inside, the
engine's tokens and logprobs match an unfused engine's."""

from __future__ import annotations

import shutil

import pytest
import torch
from transformers import GemmaConfig, GemmaForCausalLM
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from rollout import LLM, EngineConfig, SamplingParams
from rollout.hf import attention as hf_attention
from rollout.hf import fused_attention, fused_modules
from rollout.ops import paged_attention_ref as ref
from rollout.ops.cpu_kernels import load_cpu_kernels
from rollout.ops.paged_attention_sdpa import cache_writer
from tests.builders import random_prompts, reference_copy, tiny_model

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


GEMMA = GemmaConfig(
    vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
    num_key_value_heads=1, head_dim=16,
)  # fmt: skip


def llama_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


@pytest.mark.parametrize("width", [1, 24, 64, 256, 1000])
def test_rms_norm_kernel_equals_the_llama_formula(width: int) -> None:
    g = torch.Generator().manual_seed(width)
    x = torch.randn(2, 5, width, generator=g) * 4
    weight = torch.randn(width, generator=g)
    got = load_cpu_kernels().rms_norm(x, weight, 1e-6)
    torch.testing.assert_close(got, llama_rms_norm(x, weight, 1e-6), rtol=1e-6, atol=1e-6)


def test_silu_mul_kernel_equals_torch_within_float_rounding() -> None:
    g = torch.Generator().manual_seed(0)
    gate = torch.cat([torch.randn(100_003, generator=g) * 30, torch.linspace(-100, 100, 2001)])
    up = torch.randn(gate.shape, generator=g)
    want = torch.nn.functional.silu(gate) * up
    got = load_cpu_kernels().silu_mul(gate, up)
    relative = (got - want).abs() / want.abs().clamp_min(1e-30)
    assert relative.max() < 5e-7


def test_silu_mul_kernel_keeps_torch_at_the_extremes() -> None:
    gate = torch.tensor(
        [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 88.0, -88.0, 89.0, -89.0, 1e4, -1e4]
    )
    want = torch.nn.functional.silu(gate)
    got = load_cpu_kernels().silu_mul(gate, torch.ones_like(gate))
    torch.testing.assert_close(got, want, rtol=3e-7, atol=0, equal_nan=True)
    assert torch.equal(got.signbit(), want.signbit())


def test_write_kv_kernel_equals_index_copy_for_strided_rows() -> None:
    g = torch.Generator().manual_seed(1)
    qkv = torch.randn(7, 3, 2, 16, generator=g)  # K and V are strided views of one projection
    key, value = qkv[:, 1], qkv[:, 2]
    slots = torch.tensor([5, 0, 31, 17, 16, 2, 9])
    want_k, want_v = torch.zeros(4, 8, 2, 16), torch.zeros(4, 8, 2, 16)
    ref.write_kv_cache(key, value, want_k, want_v, slots)
    got_k, got_v = torch.zeros_like(want_k), torch.zeros_like(want_v)
    load_cpu_kernels().write_kv(got_k, got_v, key, value, slots)
    assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)


def test_write_kv_kernel_refuses_a_bad_slot_before_writing_anything() -> None:
    key_cache, value_cache = torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8)
    rows = torch.ones(3, 1, 8)
    with pytest.raises(RuntimeError, match="slot 8 outside"):
        load_cpu_kernels().write_kv(key_cache, value_cache, rows, rows, torch.tensor([0, 1, 8]))
    assert not key_cache.any() and not value_cache.any()


@pytest.mark.parametrize(("arch", "norms"), [("llama", 5), ("qwen2", 5), ("qwen3", 9), ("mistral", 5)])
def test_the_norms_mlps_and_attention_of_llama_family_models_are_fused(arch: str, norms: int) -> None:
    """Two norms per layer and the final one; Qwen3 adds a query and a key norm per layer; one rotary
    embedding per model."""
    model = tiny_model(arch)
    assert fused_modules.install(model) == {"rms_norm": norms, "gated_mlp": 2, "attention": 2, "rotary": 1}
    assert fused_modules.fused_module_count(model) == norms + 5


def test_rotary_kernel_equals_transformers_bit_for_bit() -> None:
    """The products are rounded before the sum (the build turns FMA contraction off), as the torch ops."""
    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(1, 4, 9, 32, generator=g), torch.randn(1, 2, 9, 32, generator=g)
    cos, sin = torch.randn(1, 9, 32, generator=g), torch.randn(1, 9, 32, generator=g)
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    kernels = load_cpu_kernels()
    assert torch.equal(kernels.rotary(q[0].transpose(0, 1), cos[0], sin[0]), want_q[0].transpose(0, 1))
    assert torch.equal(kernels.rotary(k[0].transpose(0, 1), cos[0], sin[0]), want_k[0].transpose(0, 1))


def test_an_attention_class_outside_the_list_keeps_transformers_forward() -> None:
    """Gemma's attention could pass the short probe while its softcap and scaling differ at scale:
    only the classes whose forward the fused one restates are switched."""
    model = GemmaForCausalLM(GEMMA)
    assert fused_modules.install(model)["attention"] == 0


def test_a_mistral_window_reaches_the_fused_attention_from_the_config() -> None:
    """Mistral takes its window from the config, Qwen2 from the module: each as its own forward does."""
    llm = LLM(model=tiny_model("mistral", seed=3, sliding_window=8), config=EngineConfig(num_blocks=64))
    reference = reference_copy(llm.engine.model)
    reference.set_attn_implementation("sdpa")  # transformers' eager mask has no window
    prompt = random_prompts(1, 20, 20, seed=4)[0]
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))[0]
    want = reference.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False, pad_token_id=0)
    assert fused_modules.fused_module_count(llm.engine.model) > 0
    assert out.outputs[0].token_ids == want[0, 20:].tolist()


def test_a_norm_whose_forward_the_kernel_does_not_reproduce_is_left_alone() -> None:
    """Gemma's RMSNorm scales by (1 + weight): the probe sees it and keeps transformers' forward."""
    model = GemmaForCausalLM(GEMMA)
    counts = fused_modules.install(model)
    assert counts["rms_norm"] == 0
    assert type(model.model.norm).forward is model.model.norm.forward.__func__


def test_outside_the_engine_a_fused_model_is_transformers_model_bit_for_bit() -> None:
    model = tiny_model("qwen3", seed=2)
    reference = reference_copy(model)
    model.set_attn_implementation("eager")
    fused_modules.install(model)
    ids = torch.tensor([random_prompts(1, 9, 9, seed=3)[0]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)


def test_a_fused_module_records_gradients_through_transformers_forward() -> None:
    """The kernels have no backward: with autograd on, even inside the engine's context, the module's
    own forward runs and the gradient flows."""
    model = tiny_model("llama")
    fused_modules.install(model)
    norm = model.model.norm
    x = torch.randn(3, 64, requires_grad=True)
    token = hf_attention._CURRENT.set(object())
    try:
        norm(x).sum().backward()
    finally:
        hf_attention._CURRENT.reset(token)
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "qwen3_moe"])
def test_a_fused_engine_samples_what_an_unfused_one_does(arch: str, monkeypatch) -> None:
    """Seeded samples and their logprobs, fused engine against one whose modules run transformers' ops."""
    prompts = random_prompts(3, 5, 30, seed=4)
    params = SamplingParams(n=3, max_tokens=12, temperature=1.0, seed=5, logprobs=0, ignore_eos=True)
    fused = LLM(model=tiny_model(arch, seed=6), config=EngineConfig(num_blocks=128))
    assert fused_modules.fused_module_count(fused.engine.model) > 0
    monkeypatch.setattr(fused_modules, "install", lambda model: {})
    plain = LLM(model=tiny_model(arch, seed=6), config=EngineConfig(num_blocks=128))
    assert fused_modules.fused_module_count(plain.engine.model) == 0
    for got, want in zip(fused.generate(prompts, params), plain.generate(prompts, params), strict=True):
        for a, b in zip(got.outputs, want.outputs, strict=True):
            assert a.token_ids == b.token_ids
            torch.testing.assert_close(
                torch.tensor(a.token_logprobs), torch.tensor(b.token_logprobs), rtol=0, atol=1e-5
            )


def test_the_backend_cache_writer_takes_index_copy_where_the_kernel_does_not_serve() -> None:
    """bf16 caches: the compiled copy is fp32-only, so the writer falls back and still writes them."""
    writer = cache_writer(load_cpu_kernels())
    key = torch.randn(3, 2, 8).bfloat16()
    key_cache, value_cache = (
        torch.zeros(2, 4, 2, 8, dtype=torch.bfloat16),
        torch.zeros(2, 4, 2, 8, dtype=torch.bfloat16),
    )
    writer(key, key, key_cache, value_cache, torch.tensor([6, 1, 3]))
    assert torch.equal(key_cache.view(-1, 2, 8)[torch.tensor([6, 1, 3])], key)


def test_nothing_is_fused_without_the_kernels(monkeypatch) -> None:
    monkeypatch.setattr(fused_modules, "load_cpu_kernels", lambda: None)
    model = tiny_model("llama")
    assert fused_modules.install(model) == {"rms_norm": 0, "gated_mlp": 0, "attention": 0, "rotary": 0}
    assert fused_modules.fused_module_count(model) == 0


def test_the_fused_attention_serves_only_what_it_restates() -> None:
    """A keyword the engine's attention would use, a transformers cache or a batch of rows sends the
    call to transformers' forward."""
    attention = tiny_model("qwen2").model.layers[0].self_attn
    x, rotary = torch.randn(1, 3, 64), (torch.randn(1, 3, 16), torch.randn(1, 3, 16))
    token = hf_attention._CURRENT.set(object())
    try:
        assert fused_attention._serves(attention, x, rotary, {"position_ids": None, "use_cache": False})
        assert not fused_attention._serves(attention, x, rotary, {"softcap": 30.0})
        assert not fused_attention._serves(attention, x, rotary, {"cache": object()})
        assert not fused_attention._serves(attention, torch.randn(2, 3, 64), rotary, {})
        assert not fused_attention._serves(attention, x, None, {})
    finally:
        hf_attention._CURRENT.reset(token)
    assert not fused_attention._serves(attention, x, rotary, {})  # outside the engine
