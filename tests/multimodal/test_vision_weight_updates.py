"""Weight updates reach the vision tower and the projector: after a push, outputs equal a fresh engine's
on the new weights; image features and cached blocks computed under the old version are never reused."""

from __future__ import annotations

import copy

import torch
from peft import LoraConfig, get_peft_model

from rollout import LLM, EngineConfig, SamplingParams
from rollout.multimodal.llm_images import image_prompts
from tests.multimodal.vlm_builders import llava_processor, random_image, tiny_llava

PROMPT = {"prompt": "ab<image>cd", "multi_modal_data": {"image": random_image(40)}}
PARAMS = SamplingParams(n=2, max_tokens=6, temperature=1.0, seed=2, logprobs=0, ignore_eos=True)
TOWER = "model.vision_tower.encoder.layers.0.mlp.fc1.weight"
PROJECTOR = "model.multi_modal_projector.linear_1.weight"


def new_weights(model) -> dict[str, torch.Tensor]:
    params = dict(model.named_parameters())
    g = torch.Generator().manual_seed(7)
    return {
        name: params[name].detach() + torch.randn(params[name].shape, generator=g)
        for name in (TOWER, PROJECTOR)
    }


def samples(llm: LLM) -> list[tuple[list[int], list[float]]]:
    return [(s.token_ids, s.token_logprobs) for s in llm.generate([PROMPT], PARAMS)[0].outputs]


def test_an_update_of_the_tower_serves_like_a_fresh_engine() -> None:
    llm = LLM(
        model=tiny_llava(), tokenizer=llava_processor(), config=EngineConfig(num_blocks=128, block_size=4)
    )
    before = samples(llm)  # its features and blocks are cached under version 0
    update = new_weights(llm.engine.model)
    assert llm.update_weights(update) == 1
    after = samples(llm)
    fresh_model = tiny_llava()
    fresh_model.load_state_dict({**fresh_model.state_dict(), **update})
    fresh = LLM(
        model=fresh_model, tokenizer=llava_processor(), config=EngineConfig(num_blocks=128, block_size=4)
    )
    want = samples(fresh)
    assert [t for t, _ in after] == [t for t, _ in want]
    for (_, got), (_, expected) in zip(after, want, strict=True):
        assert max(abs(a - b) for a, b in zip(got, expected, strict=True)) < 1e-5
    assert after != before
    assert llm.engine.local_runner.images.num_encoder_runs == 2  # once per request, each version its own


def test_in_flight_recompute_recomputes_the_image_features() -> None:
    llm = LLM(
        model=tiny_llava(), tokenizer=llava_processor(), config=EngineConfig(num_blocks=128, block_size=4)
    )
    engine = llm.engine
    ids, _, images = image_prompts(llm, [PROMPT])
    engine.add_request(
        "r", ids[0], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True), multi_modal=images[0]
    )
    engine.step()  # the prompt computed with version 0's features
    engine.update_weights(new_weights(engine.model), in_flight="recompute")
    outputs = []
    while engine.has_unfinished_requests():
        outputs += engine.step()
    assert engine.local_runner.images.num_encoder_runs == 2
    # the first token came from the prefill under version 0; every later one attended to version 1's KV only
    assert outputs[0].outputs[0].kv_versions == [(0, 0), (1, 1)]


def test_a_lora_adapter_push_reaches_the_tower() -> None:
    """A PEFT adapter over the vision tower's MLPs and the language model's attention, pushed as an adapter,
    serves what the merged model serves."""
    policy = get_peft_model(
        tiny_llava(), LoraConfig(r=4, target_modules=["fc1", "q_proj"], init_lora_weights=False)
    )
    assert any("vision_tower" in name and "lora_A" in name for name, _ in policy.named_parameters())
    llm = LLM(
        model=tiny_llava(), tokenizer=llava_processor(), config=EngineConfig(num_blocks=128, block_size=4)
    )
    assert llm.update_weights(policy) == 1
    merged = copy.deepcopy(policy).merge_and_unload()
    fresh = LLM(model=merged, tokenizer=llava_processor(), config=EngineConfig(num_blocks=128, block_size=4))
    want = samples(fresh)
    got = samples(llm)
    assert [t for t, _ in got] == [t for t, _ in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5
