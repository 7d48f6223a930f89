"""vLLM's text settings in GRPOConfig.generation_kwargs reach a real `rollout serve` with their meaning:
stop strings (and include_stop_str_in_output), special-token rendering, detokenize."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")

from trl_builders import grpo_args, length_reward, make_dataset, make_model, make_tokenizer, serving_model  # noqa: E402

from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer  # noqa: E402
from trainer_plugins.trl.text_settings import TEXT_GENERATION_KWARGS  # noqa: E402

STOPS = ["1", "2", "3", "4", "5", "a", "e"]  # met often by a random tiny model over 46 characters
SETTINGS = {
    "stop": dict(
        stop=STOPS,
        include_stop_str_in_output=True,
        skip_special_tokens=False,
        spaces_between_special_tokens=False,
    ),
    "no text": dict(detokenize=False),
}


def test_every_text_key_is_in_a_settings_case() -> None:
    assert sorted(set().union(*SETTINGS.values())) == sorted(TEXT_GENERATION_KWARGS)


def recorded_rounds(trainer: RolloutGRPOTrainer) -> list[tuple]:
    """(params, outputs) of every training round the trainer's client sends to the server."""
    client, rounds = trainer.vllm_generation.client, []
    generate = client.generate

    def recording(prompts, params, *args, **kwargs):
        outputs = generate(prompts, params, *args, **kwargs)
        if params.n == trainer.num_generations:  # not the parity probe
            rounds.append((params, outputs))
        return outputs

    client.generate = recording
    return rounds


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SETTINGS))
def test_text_generation_kwargs_reach_the_server_with_their_meaning(tmp_path: Path, case: str) -> None:
    kwargs = SETTINGS[case]
    tokenizer = make_tokenizer()
    with serving_model(tmp_path) as address:
        trainer = RolloutGRPOTrainer(
            make_model(tokenizer, seed=0),
            length_reward,
            grpo_args(tmp_path, max_steps=1, generation_kwargs=kwargs),
            train_dataset=make_dataset(),
            processing_class=tokenizer,
            rollout_config=RolloutConfig(server=address, wait_timeout=120),
        )
        rounds = recorded_rounds(trainer)
        trainer.train()
    assert trainer.state.global_step == 1 and rounds
    samples = [s for params, outputs in rounds for o in outputs for s in o.outputs]
    for params, _ in rounds:
        assert {k: getattr(params, k) for k in kwargs} == {
            k: tuple(v) if k == "stop" else v for k, v in kwargs.items()
        }
    if case == "no text":
        assert all(s.text is None for s in samples)
        return
    stopped = [s for s in samples if isinstance(s.stop_reason, str)]
    assert stopped  # the strings were chosen to be met
    for sample in samples:
        decoded = tokenizer.decode(sample.token_ids)
        if sample in stopped:  # the tokens end at the one that completed the string, which the text keeps
            assert sample.text.endswith(sample.stop_reason) and decoded.endswith(sample.stop_reason)
            assert not any(stop in tokenizer.decode(sample.token_ids[:-1]) for stop in STOPS)
        else:
            assert not any(stop in decoded for stop in STOPS)
