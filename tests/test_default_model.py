"""The embedded default model ships intact, loads offline with plain transformers, and is imperfect.

Also the addition task's reward on hand-made cases, since every GRPO demo trusts it.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from rollout.assets import default_model_path
from rollout.tasks import addition

MAX_BYTES = 10 * 1024 * 1024
# The weights scripts/train_default_model.py produced for this release; retraining updates it on purpose.
SHIPPED_WEIGHTS_SHA256 = "9380166d105d99b27f68c6915a6e5ad8473872e4417f6b7c9d1ad9d28c3101b3"


def load_default_model() -> tuple[PreTrainedModel, AutoTokenizer]:
    path = default_model_path()
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def test_default_model_files_match_checksums() -> None:
    path = default_model_path()
    recorded = json.loads((path / "CHECKSUMS.json").read_text())["files"]
    shipped = {p.name for p in path.iterdir()} - {"CHECKSUMS.json"}
    assert set(recorded) == shipped
    for name, digest in recorded.items():
        assert hashlib.sha256((path / name).read_bytes()).hexdigest() == digest, name
    assert (
        recorded["model.safetensors"] == SHIPPED_WEIGHTS_SHA256
    )  # a swapped model plus a regenerated record fails


def test_default_model_is_under_10_mb() -> None:
    assert sum(p.stat().st_size for p in default_model_path().iterdir()) < MAX_BYTES


def test_default_model_loads_with_eos_and_pad_set() -> None:
    model, tokenizer = load_default_model()
    assert model.config.vocab_size == len(tokenizer)
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    assert tokenizer.eos_token_id != tokenizer.pad_token_id


def test_tokenizer_round_trips_a_prompt_one_token_per_character() -> None:
    _, tokenizer = load_default_model()
    ids = tokenizer("12+345=")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert len(ids) == 1 + len("12+345=")
    assert tokenizer.decode(ids, skip_special_tokens=True) == "12+345="


def test_greedy_generate_is_right_on_some_prompts_and_wrong_on_others() -> None:
    model, tokenizer = load_default_model()
    prompts = addition.make_prompts(32, seed=0)
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, max_new_tokens=8)
    completions = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    rewards = [addition.reward(p, c) for p, c in zip(prompts, completions, strict=True)]
    assert 0 < sum(rewards) < len(rewards)


def test_answer_is_the_sum() -> None:
    assert addition.answer("12+345=") == "357"
    assert addition.answer("0+0=") == "0"
    assert addition.answer("999+999=") == "1998"


@pytest.mark.parametrize(
    ("completion", "expected"),
    [("357", 1.0), (" 357\n", 1.0), ("358", 0.0), ("0357", 0.0), ("35", 0.0), ("", 0.0), ("3+57", 0.0)],
)
def test_reward_is_one_only_for_the_exact_sum(completion: str, expected: float) -> None:
    assert addition.reward("12+345=", completion) == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [("357", 1.0), ("358", 2 / 3), ("457", 2 / 3), ("57", 0.5), ("1357", 0.5), ("abc", 0.0), ("", 0.0)],
)
def test_digit_reward_gives_partial_credit_below_the_exact_answer(completion: str, expected: float) -> None:
    assert addition.digit_reward("12+345=", completion) == pytest.approx(expected)


def test_make_prompts_is_deterministic_and_in_range() -> None:
    prompts = addition.make_prompts(200, seed=7)
    assert prompts == addition.make_prompts(200, seed=7)
    assert prompts != addition.make_prompts(200, seed=8)
    for prompt in prompts:
        a, b = prompt.removesuffix("=").split("+")
        assert 1 <= len(a) <= addition.MAX_DIGITS and 1 <= len(b) <= addition.MAX_DIGITS
        assert str(int(a)) == a and str(int(b)) == b  # no leading zeros


@pytest.mark.parametrize("prompt", ["12+345", "12-3=", "a+b=", "", "1+2=3"])
def test_malformed_prompt_raises_value_error_naming_prompt(prompt: str) -> None:
    with pytest.raises(ValueError, match="prompt"):
        addition.answer(prompt)


def test_make_prompts_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="n must"):
        addition.make_prompts(-1, seed=0)
    with pytest.raises(ValueError, match="max_digits"):
        addition.make_prompts(1, seed=0, max_digits=0)
