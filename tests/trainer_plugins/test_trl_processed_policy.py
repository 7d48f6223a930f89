"""RolloutConfig.trained_policy against a real `rollout serve` and a real GRPOTrainer. "processed" (the
default): with every sampling setting the plugin accepts, alone and together, TRL's importance-sampling
ratio is 1 (fp32, within 1e-3) at every step and its loss is computed on the processed logprobs (equal to
the server's, with gradient). "unprocessed": TRL's own temperature-only policy, with the true off-policy
ratio. What the trainer cannot replay exactly is refused at start-up, naming it."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402
from trl_builders import (  # noqa: E402
    grpo_args,
    logged,
    make_tokenizer,
    make_trainer,
    serving_model,
)

from trainer_plugins.trl import RolloutConfig, RolloutGeneration, RolloutGRPOTrainer  # noqa: E402


def token(char: str) -> int:
    return make_tokenizer().convert_tokens_to_ids(char)


EOS = make_tokenizer().eos_token_id
DIGITS = [token(c) for c in "0123456789"]
SETTINGS: dict[str, dict[str, Any]] = {
    "min_tokens": dict(generation_kwargs={"min_tokens": 6}),
    "bad_words": dict(generation_kwargs={"bad_words": ["1", "2 3", "a"]}),
    "allowed_token_ids": dict(generation_kwargs={"allowed_token_ids": [*DIGITS, EOS]}),
    "logit_bias": dict(generation_kwargs={"logit_bias": {str(token("5")): 4.0, str(token("=")): -3.0}}),
    "frequency_penalty": dict(generation_kwargs={"frequency_penalty": 1.5}),
    "presence_penalty": dict(generation_kwargs={"presence_penalty": 1.2}),
    "repetition_penalty": dict(repetition_penalty=1.6),
    "structured_regex": dict(vllm_structured_outputs_regex="[0-9]{1,3}=[a-c]{1,2}"),
    "structured_outputs_choice": dict(
        generation_kwargs={"structured_outputs": {"choice": ["12", "7+8=", "abc"]}}
    ),
    "top_k": dict(top_k=3),
    "top_p": dict(top_p=0.6),
    "min_p": dict(min_p=0.3),
    "temperature": dict(temperature=0.6),
    "everything": dict(
        temperature=0.8,
        top_k=20,
        top_p=0.9,
        min_p=0.02,
        repetition_penalty=1.2,
        generation_kwargs={
            "min_tokens": 3,
            "bad_words": ["7"],
            "logit_bias": {str(token("5")): 2.0},
            "frequency_penalty": 0.5,
            "presence_penalty": 0.3,
        },
    ),
}


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One server for the module: every trainer pushes its own weights before its first round."""
    with serving_model(tmp_path_factory.mktemp("served")) as served:
        yield served


def record_rounds_and_loss_logps(trainer: RolloutGRPOTrainer) -> tuple[dict, list]:
    """{prompt + completion ids: the server's logprobs} of every round, and the loss's per-token logps."""
    backend, request = trainer.vllm_generation, trainer.vllm_generation._request
    served: dict[tuple[int, ...], list[float]] = {}
    loss_calls: list[tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]] = []

    def recording_request(*args: Any) -> Any:
        batch = request(*args)
        prompts = [
            p for p in batch.prompt_ids for _ in range(len(batch.completion_ids) // len(batch.prompt_ids))
        ]
        for prompt, completion, logprobs in zip(prompts, batch.completion_ids, batch.logprobs, strict=True):
            served[tuple(prompt + completion)] = logprobs
        return batch

    compute = trainer._get_per_token_logps_and_entropies

    def recording_logps(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        out = compute(model, input_ids, attention_mask, logits_to_keep, **kwargs)
        if kwargs.get("compute_entropy"):  # the loss's call
            loss_calls.append((input_ids, attention_mask, logits_to_keep, out[0]))
        return out

    backend._request = recording_request
    trainer._get_per_token_logps_and_entropies = recording_logps
    return served, loss_calls


def loss_vs_server(served: dict, loss_calls: list) -> tuple[float, int, bool]:
    """(max |loss logp - server logprob|, tokens compared, every loss logp carries a gradient)."""
    worst, count, grads = 0.0, 0, True
    for input_ids, mask, length, logps in loss_calls:
        grads &= logps.requires_grad
        for ids, row_mask, row_logps in zip(input_ids, mask, logps, strict=True):
            prompt = ids[:-length][row_mask[:-length].bool()].tolist()
            kept = row_mask[-length:].bool()
            completion = ids[-length:][kept].tolist()
            server = torch.tensor(served[tuple(prompt + completion)])
            worst = max(worst, (row_logps[kept].detach() - server).abs().max().item())
            count += len(completion)
    return worst, count, grads


@pytest.mark.slow
@pytest.mark.parametrize("name", SETTINGS)
def test_the_importance_sampling_ratio_is_one_and_the_loss_uses_the_processed_logprobs(
    tmp_path: Path, address: str, name: str
) -> None:
    if "structured" in name:
        pytest.importorskip("xgrammar")
    trainer = make_trainer(grpo_args(tmp_path, max_steps=3, **SETTINGS[name]), address)
    served, loss_calls = record_rounds_and_loss_logps(trainer)
    trainer.train()
    ratios = logged(trainer, "sampling/importance_sampling_ratio/min") + logged(
        trainer, "sampling/importance_sampling_ratio/max"
    )
    assert len(ratios) == 6 and all(abs(r - 1) <= 1e-3 for r in ratios), ratios
    assert max(logged(trainer, "sampling/sampling_logp_difference/max")) < 1e-4
    worst, count, grads = loss_vs_server(served, loss_calls)
    assert count > 0 and worst < 1e-4 and grads, (worst, count, grads)
    assert (trainer.vllm_generation.policy.replay is None) == (name == "temperature")  # TRL's own already is


@pytest.mark.slow
def test_the_unprocessed_policy_keeps_trls_logprobs_and_the_true_off_policy_ratio(
    tmp_path: Path, address: str
) -> None:
    settings = dict(SETTINGS["logit_bias"], vllm_importance_sampling_mode="token_truncate")
    trainer = make_trainer(
        grpo_args(tmp_path, max_steps=2, **settings), address, trained_policy="unprocessed"
    )
    served, loss_calls = record_rounds_and_loss_logps(trainer)
    trainer.train()
    assert trainer.vllm_generation.policy.replay is None
    # a "5" the bias of +4 made likely is far less likely under TRL's unbiased policy: ratio << 1
    assert min(logged(trainer, "sampling/importance_sampling_ratio/min")) < 0.2
    worst, _, _ = loss_vs_server(served, loss_calls)
    assert worst > 1.0  # the loss's logprobs are TRL's own, not the server's


def test_processed_and_replayed_settings_are_checked_against_the_unprocessed_run(
    tmp_path: Path, address: str
) -> None:
    """So that the ratio test above can fail: the same settings without the replay give ratios far from 1."""
    trainer = make_trainer(
        grpo_args(tmp_path, max_steps=1, **SETTINGS["everything"]), address, trained_policy="unprocessed"
    )
    trainer.train()
    ratios = logged(trainer, "sampling/importance_sampling_ratio/min")
    assert all(r < 0.9 or math.isnan(r) for r in ratios)


def test_output_dependent_settings_with_tools_are_refused_at_start_up_naming_them(
    tmp_path: Path, address: str
) -> None:
    """With tools a completion holds tool results the server read as prompt: min_tokens cannot be replayed
    over it, allowed_token_ids would forbid the tool results (logit_bias can: it reads no output)."""
    kwargs = {"min_tokens": 3, "allowed_token_ids": DIGITS, "logit_bias": {str(token("5")): 1.0}}
    args = grpo_args(tmp_path, generation_kwargs=kwargs)
    trainer = make_trainer(args, address)
    trainer.tools = [len]  # what GRPOTrainer(tools=[...]) sets (TRL's own checks need a real chat model)
    with pytest.raises(
        ValueError, match=r"\['min_tokens', 'allowed_token_ids'\].*tools.*trained_policy='unprocessed'"
    ):
        RolloutGeneration(trainer, trainer.rollout_config)
    RolloutGeneration(trainer, RolloutConfig(server=address, wait_timeout=120, trained_policy="unprocessed"))


def test_a_grammar_the_trainer_cannot_build_is_refused_at_start_up_naming_it(
    tmp_path: Path, address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "xgrammar", None)  # `import xgrammar` fails: the extra is missing
    args = grpo_args(tmp_path, vllm_structured_outputs_regex="[0-9]+")
    with pytest.raises(ValueError, match=r"structured_outputs: needs the grammar library"):
        make_trainer(args, address)
