"""LoRA adapter-only updates on two ranks (gloo, CPU): each rank merges its own shards, bit for bit
what a push of the merged weights writes there, with the kept bases following every push on every
rank, and a rank that fails to merge leaving every rank as it was."""

from __future__ import annotations

from pathlib import Path

import torch

from rollout.weights.lora_export import peft_update
from rollout.weights.shards import local_tensor
from tests.builders import tiny_llm, tiny_model
from tests.distributed.tp_builders import saved_model, tp_llm
from tests.weights.lora_builders import (
    assert_same_outputs,
    merged_reference,
    merged_state,
    outputs,
    peft_policy,
    set_adapter,
)


def rank0_shards(llm) -> dict[str, torch.Tensor]:
    return {name: local_tensor(p).clone() for name, p in llm.engine.model.named_parameters()}


def test_an_adapter_push_serves_bit_for_bit_what_a_merged_push_serves_on_two_ranks(tmp_path: Path) -> None:
    """Against a push of the PEFT-merged weights on the same two ranks: equal shards on rank 0 and
    equal logprobs (tolerance 0: rank 1's shards are equal too); against one device taking the same
    adapter push: the tolerance of any two-rank comparison."""
    policy = peft_policy(base_seed=0, adapter_seed=1)
    tp = tp_llm(saved_model(tmp_path / "llama", "llama", seed=0))
    try:
        assert tp.update_weights(policy) == 1
        adapted = outputs(tp)
        one = tiny_llm(seed=0)
        one.update_weights(policy)
        assert_same_outputs(adapted, outputs(one))
        adapted_shards = rank0_shards(tp)
        assert tp.update_weights(merged_state(policy)) == 2
        assert_same_outputs(adapted, outputs(tp), tolerance=0.0)
        assert all(torch.equal(t, adapted_shards[name]) for name, t in rank0_shards(tp).items())
    finally:
        tp.engine.shutdown()


def test_an_expert_adapter_push_serves_bit_for_bit_what_a_merged_push_serves_on_two_ranks(
    tmp_path: Path,
) -> None:
    """LoRA on stacked MoE experts, which the plan shards (gate_up_proj strided column shards, down_proj
    row shards): each rank adds its slice of the full delta, as for a linear module."""
    policy = peft_policy(arch="qwen3_moe", adapter_seed=1)
    tp = tp_llm(saved_model(tmp_path / "qwen3_moe", "qwen3_moe", seed=0))
    try:
        assert tp.update_weights(policy) == 1
        assert "model.layers.0.mlp.experts.gate_up_proj" in tp.engine.adapters.adapted
        adapted, adapted_shards = outputs(tp), rank0_shards(tp)
        assert_same_outputs(adapted, merged_reference(policy, arch="qwen3_moe"))
        assert tp.update_weights(merged_state(policy)) == 2
        assert_same_outputs(adapted, outputs(tp), tolerance=0.0)
        assert all(torch.equal(t, adapted_shards[name]) for name, t in rank0_shards(tp).items())
    finally:
        tp.engine.shutdown()


def test_the_kept_bases_follow_every_kind_of_push_on_every_rank(tmp_path: Path) -> None:
    """Adapters merge into the base, not the previous merge; a plain push of the weights ends them
    (a rank still keeping the old base would merge the next adapter into it); `lora="full"` sets the
    base and the adapter together. After each: what one device serves after the merged push."""
    policy = peft_policy(base_seed=0, adapter_seed=1)
    tp = tp_llm(saved_model(tmp_path / "llama", "llama", seed=0))
    try:
        tp.update_weights(policy)
        tp.update_weights(set_adapter(policy, 2))
        assert_same_outputs(outputs(tp), merged_reference(policy))
        tp.update_weights(tiny_model(seed=2).state_dict())
        assert tp.engine.adapters.adapted == []
        on_new_base = peft_policy(base_seed=2, adapter_seed=3)
        tp.update_weights(on_new_base)
        assert_same_outputs(outputs(tp), merged_reference(on_new_base, server_seed=2))
        other_base = peft_policy(base_seed=1, adapter_seed=4)
        tp.update_weights(other_base, lora="full")
        assert_same_outputs(outputs(tp), merged_reference(other_base))
    finally:
        tp.engine.shutdown()


def test_a_rank_that_fails_to_merge_an_adapter_leaves_every_rank_as_it_was(tmp_path: Path) -> None:
    """Rank 0 merged its shards; rank 1 fails on one module: no rank writes or keeps a base, and rank
    0's error names rank 1, the cause and the module."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from tests.distributed.rank_fault import adapter_update_with_a_failing_rank

    path = saved_model(tmp_path / "llama", "llama")
    named, lora = peft_update(peft_policy(adapter_seed=1))
    store = dist.TCPStore("127.0.0.1", 0, world_size=2, is_master=True, wait_for_workers=False)
    mp.spawn(adapter_update_with_a_failing_rank, args=(str(path), store.port, named, dict(lora)), nprocs=2)
