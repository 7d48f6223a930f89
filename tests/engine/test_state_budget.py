"""A hybrid model's recurrent states (running slots and prefix-cache snapshots) come out of the KV cache's
memory budget: measured exactly at load, refused by name when they do not fit, reported in stats."""

from __future__ import annotations

import pytest

from rollout import LLM, EngineConfig, SamplingParams
from rollout.engine.hybrid.state_budget import SNAPSHOT_SHARE, plan_state_budget, probe_states
from rollout.engine.hybrid.state_snapshots import state_bytes, state_tensors
from rollout.engine.model.model_guard import check_model
from tests.builders import random_prompts, tiny_model
from tests.models.zoo import HYBRID, Family, build

BLOCK, MAX_LEN, MAX_SEQS = 4, 64, 256
QWEN3_NEXT = next(f for f in HYBRID if f.model_type == "qwen3_next")  # Gated DeltaNet + attention
BAMBA = next(f for f in HYBRID if f.model_type == "bamba")  # Mamba2 + attention
MiB = 2**20


def budget_llm(family: Family, budget_bytes: int | None, **config: object) -> LLM:
    gb = None if budget_bytes is None else budget_bytes / 2**30
    config = {"block_size": BLOCK, "max_num_batched_tokens": 12, "max_model_len": MAX_LEN, **config}
    return LLM(model=build(family), config=EngineConfig(kv_cache_memory_gb=gb, **config))


def layout(slot) -> list[tuple[tuple[int, ...], object]]:
    return [(tuple(t.shape), t.dtype) for t in state_tensors(slot)]


def per_seq_bytes(family: Family) -> int:
    return budget_llm(family, None, num_blocks=64).engine.stats()["state_bytes_per_seq"]


@pytest.mark.parametrize("family", HYBRID, ids=lambda f: f.model_type)
def test_the_probe_measures_a_real_slot_after_a_multi_chunk_prefill(family: Family) -> None:
    """A 30-token prompt under a 12-token budget prefills in chunks, forks into 2 samples that decode
    together (their states become rows of a stack): each slot has the probe's shapes, dtypes and bytes."""
    engine = budget_llm(family, None, num_blocks=64).engine
    params = SamplingParams(n=2, max_tokens=8, ignore_eos=True)
    engine.add_request("r", random_prompts(1, 30, 30, seed=1)[0], params)
    seqs = engine.requests["r"].sequences
    while len(seqs) < 2 or min(s.num_output_tokens for s in seqs) < 3:
        engine.step()
    pool = engine.block_manager.states
    probe = probe_states(engine.model, pool)
    assert state_bytes(probe) > 0
    for seq in seqs:
        slot = pool.slot(seq.seq_id, fresh=False)
        assert layout(slot) == layout(probe)
        assert state_bytes(slot) == engine.stats()["state_bytes_per_seq"]


@pytest.mark.parametrize("family", [QWEN3_NEXT, BAMBA], ids=lambda f: f.model_type)
def test_the_kv_blocks_shrink_by_exactly_the_states_bytes(family: Family) -> None:
    per_seq, budget = per_seq_bytes(family), 8 * MiB
    engine = budget_llm(family, budget).engine
    stats, per_block = engine.stats(), check_model(engine.model).bytes_per_block(BLOCK)
    snapshots = min(MAX_SEQS, int((budget - MAX_SEQS * per_seq) * SNAPSHOT_SHARE) // per_seq)
    assert stats["state_bytes_reserved"] == (MAX_SEQS + snapshots) * per_seq
    assert stats["num_blocks_total"] == (budget - stats["state_bytes_reserved"]) // per_block
    assert stats["num_blocks_total"] < MAX_SEQS * MAX_LEN // BLOCK  # the budget binds, not the usable count


def test_a_budget_too_small_for_the_running_slots_is_refused_naming_max_num_seqs() -> None:
    per_seq = per_seq_bytes(QWEN3_NEXT)
    size = rf"256 x {per_seq / 2**10:.2f} KiB = {MAX_SEQS * per_seq / MiB:.2f} MiB"
    with pytest.raises(ValueError, match=rf"max_num_seqs 256: .*{size}.*lower max_num_seqs"):
        budget_llm(QWEN3_NEXT, MAX_SEQS * per_seq - 1)


def test_lowering_max_num_seqs_fits_the_same_budget() -> None:
    per_seq = per_seq_bytes(QWEN3_NEXT)
    plan = budget_llm(QWEN3_NEXT, MAX_SEQS * per_seq - 1, max_num_seqs=128).engine.state_budget
    assert (plan.num_slots, plan.bytes_per_seq) == (128, per_seq)


def test_the_default_snapshot_cap_is_a_quarter_of_what_the_running_slots_leave() -> None:
    per_seq, budget = per_seq_bytes(QWEN3_NEXT), 4 * MiB
    stats = budget_llm(QWEN3_NEXT, budget).engine.stats()
    left = budget - MAX_SEQS * per_seq
    assert stats["max_state_snapshots"] == int(left * SNAPSHOT_SHARE) // per_seq < MAX_SEQS


def test_the_default_snapshot_cap_is_at_most_max_num_seqs() -> None:
    assert budget_llm(QWEN3_NEXT, None, num_blocks=64).engine.stats()["max_state_snapshots"] == MAX_SEQS


def test_a_budget_that_leaves_no_snapshot_turns_prefix_caching_off_and_says_so(caplog) -> None:
    per_seq = per_seq_bytes(QWEN3_NEXT)
    with caplog.at_level("WARNING", logger="rollout.engine.hybrid.state_snapshots"):
        stats = budget_llm(QWEN3_NEXT, MAX_SEQS * per_seq + per_seq, num_blocks=64).engine.stats()
    assert (stats["max_state_snapshots"], stats["prefix_caching"]) == (0, 0)
    assert "prefix caching is off for this hybrid model" in caplog.text


def test_explicit_num_blocks_keep_their_count_and_still_get_the_snapshot_default() -> None:
    per_seq, budget = per_seq_bytes(QWEN3_NEXT), 4 * MiB
    stats = budget_llm(QWEN3_NEXT, budget, num_blocks=64).engine.stats()
    assert stats["num_blocks_total"] == 64
    assert stats["max_state_snapshots"] == int((budget - MAX_SEQS * per_seq) * SNAPSHOT_SHARE) // per_seq


def test_an_explicit_max_state_snapshots_that_does_not_fit_is_refused_naming_it() -> None:
    per_seq, budget = per_seq_bytes(QWEN3_NEXT), 4 * MiB
    fits = (budget - MAX_SEQS * per_seq) // per_seq
    stats = budget_llm(QWEN3_NEXT, budget, max_state_snapshots=fits).engine.stats()
    assert stats["max_state_snapshots"] == fits
    with pytest.raises(ValueError, match=rf"max_state_snapshots {fits + 1}: .*lower max_state_snapshots"):
        budget_llm(QWEN3_NEXT, budget, max_state_snapshots=fits + 1)


def test_without_prefix_caching_no_snapshot_is_budgeted() -> None:
    config = EngineConfig(enable_prefix_caching=False, max_state_snapshots=10**6)
    plan = plan_state_budget(config, 1000, 2**30)
    assert (plan.num_snapshots, plan.state_bytes) == (0, MAX_SEQS * 1000)


def test_a_model_without_recurrent_layers_reserves_nothing() -> None:
    stats = LLM(model=tiny_model(), config=EngineConfig(num_blocks=64)).engine.stats()
    keys = ("state_bytes_per_seq", "state_bytes_reserved", "max_state_snapshots")
    assert [stats[key] for key in keys] == [0, 0, 0]


def test_at_qwen3_next_80b_shape_a_40_gib_budget_keeps_73_snapshots() -> None:
    """docs/hybrid_models.md's figures: 36 Gated DeltaNet layers, each a bf16 conv window 8,192 x 4 and an
    fp32 state 32 x 128 x 128: 74.25 MiB a sequence, 18.56 GiB for 256 running slots."""
    per_seq = 36 * (8192 * 4 * 2 + 32 * 128 * 128 * 4)
    plan = plan_state_budget(EngineConfig(), per_seq, 40 * 2**30)
    assert (per_seq, plan.num_slots, plan.num_snapshots) == (74.25 * MiB, 256, 73)
