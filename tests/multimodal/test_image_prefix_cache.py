"""The prefix cache keys every block an image's tokens touch with the image's content hash: the same
text with another image never shares those blocks (nor any after them), the same image does."""

from __future__ import annotations

from rollout import LLM, EngineConfig, SamplingParams
from tests.multimodal.vlm_builders import llava_processor, random_image, tiny_llava

TEXT = "abcdefgh<image>ij"  # blocks of 4: two of text, one of the image's 4 tokens, then "ij"
PARAMS = SamplingParams(n=2, max_tokens=6, temperature=1.0, seed=5, logprobs=0, ignore_eos=True)


def make_llm() -> LLM:
    config = EngineConfig(num_blocks=128, block_size=4)
    return LLM(model=tiny_llava(), tokenizer=llava_processor(), config=config)


def generate(llm: LLM, image) -> list[tuple[list[int], list[float]]]:
    out = llm.generate([{"prompt": TEXT, "multi_modal_data": {"image": image}}], PARAMS)[0]
    return [(s.token_ids, s.token_logprobs) for s in out.outputs]


def test_same_text_other_image_shares_only_the_text_blocks() -> None:
    first, second = random_image(10), random_image(11)
    fresh = generate(make_llm(), second)
    llm = make_llm()
    generate(llm, first)
    hits_before = llm.stats()["num_prefix_hit_tokens"]
    got = generate(llm, second)
    assert_same_samples(got, fresh)  # as if the first image had never been seen
    assert llm.stats()["num_prefix_hit_tokens"] - hits_before == 8  # the two text blocks only


def test_same_image_shares_its_blocks() -> None:
    image = random_image(12)
    llm = make_llm()
    first = generate(llm, image)
    hits_before = llm.stats()["num_prefix_hit_tokens"]
    again = generate(llm, random_image(12))  # another object, the same pixels
    assert llm.stats()["num_prefix_hit_tokens"] - hits_before == 12  # text and image blocks
    assert_same_samples(again, first)


def assert_same_samples(got: list, want: list) -> None:
    for (tokens, logprobs), (want_tokens, want_logprobs) in zip(got, want, strict=True):
        assert tokens == want_tokens
        assert max(abs(a - b) for a, b in zip(logprobs, want_logprobs, strict=True)) < 1e-5
