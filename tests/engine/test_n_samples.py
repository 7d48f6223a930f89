"""N samples per prompt: one prefill, N forks sharing the prompt's blocks, every block returned after."""

import random

from rollout import SamplingParams
from tests.builders import random_prompts, tiny_llm


def test_prompt_of_n8_is_computed_once_and_samples_differ() -> None:
    llm = tiny_llm(num_blocks=128)
    prompt = random_prompts(1, 77, 77, seed=1)[0]
    out = llm.generate(
        [prompt], SamplingParams(n=8, max_tokens=16, temperature=1.0, seed=0, ignore_eos=True)
    )[0]
    stats = llm.stats()
    assert stats["num_prompt_tokens_computed"] == 77
    assert [c.index for c in out.outputs] == list(range(8))
    assert len({tuple(c.token_ids) for c in out.outputs}) == 8
    assert stats["num_blocks_free"] == stats["num_blocks_total"]


def test_forked_samples_share_full_prompt_blocks_and_copy_the_partial_one() -> None:
    llm = tiny_llm(num_blocks=64, block_size=16)
    engine = llm.engine
    engine.add_request("r", random_prompts(1, 40, 40, seed=2)[0], SamplingParams(n=4, max_tokens=8, seed=0))
    engine.step()  # prefill + first tokens: the fork happens here
    tables = [seq.block_table for seq in engine.requests["r"].sequences]
    assert len(tables) == 4 and all(t[:2] == tables[0][:2] for t in tables)  # 2 full blocks shared
    assert all(engine.block_manager.blocks[b].ref_cnt == 4 for b in tables[0][:2])
    engine.step()  # first decode: each sample writes into its own copy of the partial block
    last_blocks = {seq.block_table[2] for seq in engine.requests["r"].sequences}
    assert len(last_blocks) == 4
    assert engine.stats()["num_blocks_free"] == 64 - 2 - 4


def test_no_block_leaks_after_hundreds_of_mixed_requests() -> None:
    llm = tiny_llm(num_blocks=96, max_num_seqs=32, max_num_batched_tokens=128)
    engine, rng = llm.engine, random.Random(0)
    prompts = random_prompts(200, 1, 60, seed=3)
    for i, prompt in enumerate(prompts):
        params = SamplingParams(n=rng.choice([1, 2, 4]), max_tokens=rng.randint(1, 12), seed=i)
        engine.add_request(f"r{i}", prompt, params)
        if i % 7 == 3:
            engine.step()
            engine.abort_request(f"r{i - 1}")
    finished = 0
    while engine.has_unfinished_requests():
        finished += sum(out.finished for out in engine.step())
    stats = engine.stats()
    assert stats["num_requests_finished"] == 200
    assert stats["num_blocks_free"] == stats["num_blocks_total"]
    assert all(block.ref_cnt == 0 for block in engine.block_manager.blocks)
