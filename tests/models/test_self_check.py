"""The load-time self-check: it decodes most of its tokens, holds fp32 to the engine's 1e-4 promise on
log-probabilities, names where a departure starts, and gives one verdict whatever the CPU thread count."""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from transformers import AutoModelForCausalLM

from rollout import LLM, EngineConfig
from rollout.engine.hybrid import recurrent_layers
from rollout.engine.model import model_guard
from rollout.engine.model.check_forwards import eager_logits, engine_logits, position_gaps
from rollout.engine.model.check_plan import KINDS, check_plan
from rollout.engine.model.model_guard import UnsupportedModelError
from rollout.engine.model.pinned_routing import RoutingPin
from rollout.engine.model.self_check import TOLERANCE, run_self_check
from rollout.ops import paged_attention_ref
from rollout.ops.attention_backend import AttentionBackend
from rollout.ops.backends import get_backend
from tests.models.test_zoo import CONFIG
from tests.models.zoo import SUPPORTED, build


def test_the_check_decodes_most_tokens_beside_prefills_and_together() -> None:
    """Six decode steps per sequence; some steps decode one sequence while the other prefills, later ones
    decode both (a hybrid's batched decode rows); chunks cross block boundaries."""
    plan = check_plan(vocab=100, block_size=4, max_model_len=64, seed=0)
    for seq in range(len(plan.seqs)):
        assert plan.kinds(seq).count(KINDS[2]) == 6 and set(plan.kinds(seq)) == set(KINDS)
    kinds_per_step = [{p.kind for p in step} for step in plan.steps]
    assert {KINDS[2], KINDS[0]} in kinds_per_step and {KINDS[2], KINDS[1]} in kinds_per_step
    assert any(len(step) == 2 and all(p.kind == KINDS[2] for p in step) for step in plan.steps)
    assert plan.kinds(0).count(KINDS[1]) > 4  # the continued chunk spans more than a block


def scaled_decode_rows(eps: float) -> AttentionBackend:
    """Exact attention, except every one-token row's output is scaled by 1 + eps: a decode-only departure."""

    def attend(query, key_cache, value_cache, meta, *args, **kwargs) -> torch.Tensor:
        out = paged_attention_ref.paged_attention(query, key_cache, value_cache, meta, *args, **kwargs)
        rows = [
            start
            for start, n in zip(meta.cu_seqlens_q.tolist()[:-1], meta.query_lens_cpu, strict=True)
            if n == 1
        ]
        out[rows] = out[rows] * (1 + eps)
        return out

    return AttentionBackend(paged_attention_ref.write_kv_cache, attend)


def test_a_decode_only_departure_the_old_relative_bound_passed_is_refused_naming_where() -> None:
    """1e-4 on the decode rows' attention: logits move by under 1e-4 of the largest (what the check bounded
    before) while log-probabilities move by more than the promised 1e-4."""
    model = LLM(model=build(SUPPORTED[0]), config=EngineConfig(**CONFIG)).engine.model
    spec, backend = model_guard.check_model(model), scaled_decode_rows(1e-4)
    plan, pin = check_plan(128, 4, 64, seed=0), RoutingPin(model)
    want = eager_logits(model, plan.seqs, pin)
    got = engine_logits(model, spec, backend, 4, plan, [pin.replaying])
    assert max(((g - w).abs().max() / w.abs().max()).item() for g, w in zip(got, want, strict=True)) < 1e-4
    with pytest.raises(
        UnsupportedModelError,
        match=r"log-probabilities differ .* by (\S+) \(first prefill chunks \S+e-0[67], continued prefill "
        r"chunks \S+e-0[67], decode steps \1; .*it starts in the code of model\.layers\.0\.self_attn "
        r"\(LlamaAttention\) before it calls its o_proj, on decode steps;",
    ):
        run_self_check(model, spec, backend, block_size=4, max_model_len=64)
    assert run_self_check(model, spec, scaled_decode_rows(0.0), block_size=4, max_model_len=64) < 1e-5


def granitemoeshared_bf16(tmp_path, seed: int):
    """The issue's model: vocab 512, hidden 64, 2 layers, shared experts of 32, weights N(0, 0.15), saved
    in fp32 and loaded in bf16."""
    config = tf.GraniteMoeSharedConfig(
        vocab_size=512, hidden_size=64, num_hidden_layers=2, shared_intermediate_size=32
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.15)
    model.save_pretrained(tmp_path)
    return LLM(str(tmp_path), config=EngineConfig(dtype="bfloat16", num_blocks=160, self_check=False))


@pytest.mark.parametrize("seed", [0, 3])
def test_the_bf16_verdict_is_one_value_under_one_or_two_threads_and_far_from_its_bound(
    tmp_path, seed: int
) -> None:
    engine = granitemoeshared_bf16(tmp_path, seed).engine
    spec, backend = model_guard.check_model(engine.model), get_backend("auto", torch.device("cpu"))
    threads = torch.get_num_threads()
    try:
        verdicts = []
        for count in (1, 2):
            torch.set_num_threads(count)
            verdicts.append(run_self_check(engine.model, spec, backend, block_size=16))
            assert torch.get_num_threads() == count  # the check gives the thread count back
    finally:
        torch.set_num_threads(threads)
    assert verdicts[0] == verdicts[1] <= TOLERANCE[torch.bfloat16] / 3


def test_in_bf16_the_models_own_decode_excuses_its_rounding_not_a_wrong_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The zoo's Jamba (weights seed 2) in bf16: its one-token update reads its state out in bf16, its scan in
    fp32, so one token sits beyond the bound, as far as `generate`'s own decode is: it loads. Its continued
    chunks run whole (a scan from zero: wrong) are still refused."""
    jamba = next(f for f in SUPPORTED if f.model_type == "jamba")
    engine = LLM(
        model=build(jamba, 2).to(torch.bfloat16), config=EngineConfig(**CONFIG, self_check=False)
    ).engine
    spec, backend = model_guard.check_model(engine.model), engine.local_runner.backend
    plan, pin = check_plan(128, 4, 64, seed=0), RoutingPin(engine.model)
    want = eager_logits(engine.model, plan.seqs, pin)
    got = engine_logits(engine.model, spec, backend, 4, plan, [pin.replaying])
    gap = max(g.max().item() for g in position_gaps(torch.bfloat16, got, want))
    if gap <= TOLERANCE[torch.bfloat16]:
        pytest.skip(f"this machine's bf16 rounding keeps this Jamba under the bound ({gap:.3g})")
    assert run_self_check(engine.model, spec, backend, block_size=4, max_model_len=64) == pytest.approx(gap)
    monkeypatch.setattr(recurrent_layers, "_STEPWISE", frozenset())
    with pytest.raises(UnsupportedModelError, match=r"model_type 'jamba'.*continued prefill chunks"):
        LLM(model=build(jamba, 2).to(torch.bfloat16), config=EngineConfig(**CONFIG))
