"""Bad input raises ValueError naming the field, and nothing is queued."""

import pytest

from rollout import EngineConfig, SamplingParams
from tests.builders import tiny_llm


@pytest.mark.parametrize(
    "field, value",
    [
        ("n", 0),
        ("n", 1.5),
        ("max_tokens", 0),
        ("max_tokens", -3),
        ("temperature", -0.1),
        ("temperature", float("nan")),
        ("top_p", 0.0),
        ("top_p", 1.01),
        ("top_k", -2),
        ("min_p", 1.5),
        ("repetition_penalty", 0.0),
        ("seed", -1),
        ("stop_token_ids", (3, -2)),
        ("logprobs", -1),
        ("logprobs_mode", "logits"),
    ],
)
def test_invalid_sampling_params_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


@pytest.mark.parametrize(
    "field, value",
    [
        ("block_size", 0),
        ("max_num_seqs", -1),
        ("dtype", "float8"),
        ("attention_backend", "flash"),
        ("max_state_snapshots", -1),
    ],
)
def test_invalid_engine_config_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        EngineConfig(**{field: value})


@pytest.mark.parametrize(
    "prompt, message",
    [
        ([], "prompt_token_ids"),
        ([5, 128], "outside the vocabulary"),
        ([5, -1], "outside the vocabulary"),
        ([5] * 64, "max_model_len"),
    ],
    ids=["empty", "id-too-large", "negative-id", "too-long"],
)
def test_invalid_prompts_raise_and_queue_nothing(prompt: list[int], message: str) -> None:
    llm = tiny_llm(max_model_len=64)
    with pytest.raises(ValueError, match=message):
        llm.generate([[3, 4, 5], prompt], SamplingParams(max_tokens=2))
    assert not llm.engine.has_unfinished_requests()
    assert llm.generate([[3, 4, 5]], SamplingParams(max_tokens=2))[0].finished


def test_n_above_max_num_seqs_is_refused() -> None:
    with pytest.raises(ValueError, match="n must be <= max_num_seqs"):
        tiny_llm(max_num_seqs=4).generate([[3, 4]], SamplingParams(n=5))


def test_duplicate_request_id_is_refused() -> None:
    engine = tiny_llm().engine
    engine.add_request("a", [3, 4], SamplingParams())
    with pytest.raises(ValueError, match="request_id"):
        engine.add_request("a", [3, 4], SamplingParams())


def test_text_prompt_without_tokenizer_is_refused() -> None:
    with pytest.raises(ValueError, match=r"prompts\[0\]"):
        tiny_llm().generate(["hello"])


def test_max_model_len_beyond_the_model_is_refused() -> None:
    with pytest.raises(ValueError, match="max_model_len"):
        tiny_llm(max_model_len=100_000)


def test_top_k_minus_one_means_off_as_in_vllm() -> None:
    assert SamplingParams(top_k=-1) == SamplingParams(top_k=0)
    assert SamplingParams(top_k=-1).top_k == 0
