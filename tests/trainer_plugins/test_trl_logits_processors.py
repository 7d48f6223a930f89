"""TRL generation_kwargs with vLLM's logits-processor keys: each reaches a real `rollout serve` with its
meaning (checked in what the server generated), they are replayed on the trainer's logits (TRL's
importance-sampling ratio 1, test_trl_processed_policy.py for each), and a key TRL cannot use is refused at
start-up naming it and why."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytest.importorskip("trl")

from trl_builders import (  # noqa: E402
    free_port,
    grpo_args,
    logged,
    make_tokenizer,
    make_trainer,
    serving_model,
)

from rollout.sampling_params import SamplingParams  # noqa: E402


def token(char: str) -> int:
    return make_tokenizer().convert_tokens_to_ids(char)


@pytest.mark.slow
def test_every_logits_processor_key_reaches_the_server_with_vllms_meaning(tmp_path: Path, caplog) -> None:
    eos = make_tokenizer().eos_token_id
    allowed = [token(c) for c in "0123456789"] + [eos]
    kwargs = dict(
        min_tokens=3,
        presence_penalty=0.5,
        frequency_penalty=0.25,
        logit_bias={str(token("5")): 2.0},  # as a JSON/YAML config spells it
        allowed_token_ids=allowed,
        bad_words=["7"],
    )
    with serving_model(tmp_path) as address:
        with caplog.at_level(logging.WARNING, logger="trainer_plugins.trl"):
            trainer = make_trainer(grpo_args(tmp_path, max_steps=1, generation_kwargs=kwargs), address)
        backend, request, sent, batches = trainer.vllm_generation, trainer.vllm_generation._request, [], []
        sampling_params = backend.sampling_params
        backend.sampling_params = lambda *a, **k: sent.append(sampling_params(*a, **k)) or sent[-1]
        backend._request = lambda *a: batches.append(request(*a)) or batches[-1]
        trainer.train()
    params: SamplingParams = sent[-1]
    assert (params.min_tokens, params.presence_penalty, params.frequency_penalty) == (3, 0.5, 0.25)
    assert params.logit_bias == {token("5"): 2.0} and params.allowed_token_ids == tuple(allowed)
    assert params.bad_words == () and params.bad_words_token_ids == ((token("7"),),)  # tokenized once, here
    completions = [c for batch in batches for c in batch.completion_ids]
    assert completions
    for completion in completions:  # what the server did with them
        assert set(completion) <= set(allowed) and token("7") not in completion
        assert len(completion) >= 3
    assert "reshape the sampling distribution" not in caplog.text  # replayed, not warned about
    assert abs(logged(trainer, "sampling/importance_sampling_ratio/min")[0] - 1) <= 1e-3


def test_prompt_logprobs_is_refused_at_start_up_naming_it_and_why(tmp_path: Path) -> None:
    args = grpo_args(tmp_path, generation_kwargs={"prompt_logprobs": 1})
    with pytest.raises(ValueError, match=r"prompt_logprobs.*RolloutClient.score"):
        make_trainer(args, f"127.0.0.1:{free_port()}", wait_timeout=1.0)


def test_a_logit_bias_key_that_is_no_token_id_is_refused_naming_it(tmp_path: Path) -> None:
    args = grpo_args(tmp_path, generation_kwargs={"logit_bias": {"five": 1.0}})
    with pytest.raises(ValueError, match="logit_bias"):
        make_trainer(args, f"127.0.0.1:{free_port()}", wait_timeout=1.0)
