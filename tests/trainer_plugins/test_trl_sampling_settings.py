"""GRPOConfig sampling settings against a real server: unbounded completions, TRL's vLLM-mode checks,
and an importance-sampling ratio that measures engine-vs-trainer drift, not the truncation filters."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytest.importorskip("trl")

from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl_builders import (  # noqa: E402
    free_port,
    grpo_args,
    length_reward,
    logged,
    make_dataset,
    make_model,
    make_tokenizer,
    make_trainer,
    serving_model,
)

from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer, RolloutServerUnavailable  # noqa: E402

IS_MODES = ("sequence_mask", "sequence_truncate", "token_mask", "token_truncate")


def trl_refuses(args: GRPOConfig) -> bool:
    """TRL's own verdict with use_vllm=True: its checks run before it needs vLLM itself."""
    args.use_vllm, tokenizer = True, make_tokenizer()
    try:
        GRPOTrainer(
            make_model(tokenizer),
            length_reward,
            args,
            train_dataset=make_dataset(),
            processing_class=tokenizer,
        )
    except ValueError:
        return True
    except ImportError:  # got past its checks to building the vLLM backend
        return False
    raise AssertionError("GRPOTrainer(use_vllm=True) was built without vLLM installed")


@pytest.mark.parametrize("mode", IS_MODES)
def test_trls_vllm_mode_checks_refuse_what_trl_refuses(tmp_path: Path, mode: str) -> None:
    args = dict(loss_type="vespo", vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_max=3.0)
    unreachable = f"127.0.0.1:{free_port()}"
    refused = trl_refuses(grpo_args(tmp_path, **args))
    expected = ValueError if refused else RolloutServerUnavailable  # accepted: goes on to connect
    with pytest.raises(expected, match="vllm_importance_sampling_mode" if refused else "no rollout server"):
        make_trainer(grpo_args(tmp_path, **args), unreachable, wait_timeout=1.0)
    assert refused == (mode.startswith("sequence"))  # the rule itself: VESPO needs a token-level mode


@pytest.mark.slow
def test_vespo_with_a_token_level_is_mode_trains(tmp_path: Path) -> None:
    args = grpo_args(tmp_path, max_steps=1, loss_type="vespo", vllm_importance_sampling_mode="token_mask")
    with serving_model(tmp_path) as address:
        trainer = make_trainer(args, address)
        trainer.train()
    assert trainer.state.global_step == 1


@pytest.mark.slow
def test_max_completion_length_none_generates_up_to_the_context(tmp_path: Path) -> None:
    args = grpo_args(tmp_path, max_completion_length=None, generation_kwargs={"ignore_eos": True})
    with serving_model(tmp_path, "--max-model-len", "48") as address:
        trainer = make_trainer(args, address)
        backend, request, batches = trainer.vllm_generation, trainer.vllm_generation._request, []
        backend._request = lambda *a: batches.append(request(*a)) or batches[-1]
        trainer.train()
    assert len(batches) == 2
    for batch in batches:
        prompts = [ids for ids in batch.prompt_ids for _ in range(4)]  # a prompt's 4 samples consecutive
        for prompt, completion in zip(prompts, batch.completion_ids, strict=True):
            assert len(prompt) + len(completion) == 48  # the server's whole context, whatever the prompt


@pytest.mark.slow
def test_importance_sampling_ratio_under_top_k_measures_drift_not_the_kept_mass(
    tmp_path: Path, caplog
) -> None:
    """The processed policy (the default) replays top_k; the unprocessed one hands TRL the kept mass with
    each logprob (untruncated_logprobs, the default), or not (the ratio then carries the kept mass)."""
    args = dict(top_k=3, temperature=1.0, vllm_importance_sampling_mode="sequence_mask")
    with serving_model(tmp_path) as address:
        replayed = make_trainer(grpo_args(tmp_path / "replayed", **args), address)
        replayed.train()
        fixed = make_trainer(grpo_args(tmp_path / "fixed", **args), address, trained_policy="unprocessed")
        fixed.train()
        with caplog.at_level(logging.WARNING, logger="trainer_plugins.trl"):
            renormalised = make_trainer(
                grpo_args(tmp_path / "old", **args),
                address,
                trained_policy="unprocessed",
                untruncated_logprobs=False,
            )
        renormalised.train()
    for trainer in (replayed, fixed):
        assert max(logged(trainer, "sampling/sampling_logp_difference/max")) < 1e-4
        assert min(logged(trainer, "sampling/importance_sampling_ratio/min")) > 0.999
    assert replayed.vllm_generation.policy.replay is not None and fixed.vllm_generation.policy.replay is None
    # Without the kept mass, each token's ratio is scaled by the mass top_k=3 keeps (~3/46 on a near-flat
    # tiny model at first), and a sequence's ratio by their product.
    assert max(logged(renormalised, "sampling/importance_sampling_ratio/max")) < 0.2
    assert "TRL issue #6789" in caplog.text


def documented_rollout_func(prompts: list[str], trainer: RolloutGRPOTrainer) -> dict[str, list]:
    """The `rollout_func` of docs/trl.md, as written there."""
    ids = [trainer.processing_class(p)["input_ids"] for p in prompts]
    n = trainer.num_generations
    prompt_ids, completion_ids, logprobs, _ = trainer.vllm_generation.generate(ids, None, n)
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": [[lp[0] for lp in seq] for seq in logprobs],  # from vLLM's [token][top-k] layout
    }


@pytest.mark.slow
def test_the_documented_rollout_func_layout_gives_exact_sampling_logprobs(tmp_path: Path) -> None:
    with serving_model(tmp_path) as address:
        tokenizer = make_tokenizer()
        trainer = RolloutGRPOTrainer(
            make_model(tokenizer, seed=0),
            length_reward,
            grpo_args(tmp_path, top_k=3),
            train_dataset=make_dataset(),
            processing_class=tokenizer,
            rollout_func=documented_rollout_func,
            rollout_config=RolloutConfig(server=address, wait_timeout=120),
        )
        trainer.train()
    assert max(logged(trainer, "sampling/sampling_logp_difference/max")) < 1e-4
    assert min(logged(trainer, "sampling/importance_sampling_ratio/min")) > 0.999
