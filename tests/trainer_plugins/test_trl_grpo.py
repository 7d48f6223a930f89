"""RolloutGRPOTrainer against a real `rollout serve` process: pushes, parity, PEFT, failure paths.

Each test trains a tiny Llama for three GRPO steps on CPU; the server process starts from
different weights than the trainer, so every parity check below only passes if pushes land.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("rollout.client")

from peft import LoraConfig  # noqa: E402
from trl_builders import (  # noqa: E402
    CHARS,
    free_port,
    grpo_args,
    in_process_server,
    length_reward,
    make_dataset,
    make_model,
    make_tokenizer,
    save_model_dir,
    start_server,
)

from rollout.client import RolloutClient  # noqa: E402
from rollout.sampling_params import SamplingParams  # noqa: E402
from tests.serve_process import announced_address, stop_server  # noqa: E402
from trainer_plugins.trl import (  # noqa: E402
    RolloutConfig,
    RolloutGRPOTrainer,
    RolloutModelMismatch,
    RolloutServerUnavailable,
)

PROBE_PROMPTS = ["3+4=", "12+9="]
STARTUP_TIMEOUT = 600.0  # a hang guard: a server start is a minute on 2 busy cores


@contextlib.contextmanager
def running_server(
    tmp_path: Path, seed: int = 1, vocab_size: int | None = None, chars: list[str] | None = None
) -> Iterator[str]:
    """A `rollout serve` child process hosting a fresh tiny model; yields its address. `chars`: the
    server's tokenizer orders its characters so (another tokenizer, same vocabulary size)."""
    model_dir = tmp_path / f"server_model_{seed}_{vocab_size}_{chars is not None}"
    if vocab_size is None and chars is None:
        save_model_dir(model_dir, seed)
    else:
        tokenizer = make_tokenizer(*([chars] if chars else []))
        make_model(tokenizer, seed, vocab_size).save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
    log_path = tmp_path / f"server_{model_dir.name}.log"
    process = start_server(model_dir, 0, log_path)
    try:
        yield announced_address(process, log_path)
    finally:
        stop_server(process)


def make_trainer(tmp_path: Path, address: str, **kwargs) -> RolloutGRPOTrainer:
    tokenizer = make_tokenizer()
    return RolloutGRPOTrainer(
        make_model(tokenizer, seed=0),
        length_reward,
        grpo_args(tmp_path, max_steps=3),
        train_dataset=make_dataset(),
        processing_class=tokenizer,
        rollout_config=RolloutConfig(server=address, wait_timeout=STARTUP_TIMEOUT),
        **kwargs,
    )


def trainer_greedy(trainer: RolloutGRPOTrainer, prompt_ids: list[int]) -> list[int]:
    model, was_training = trainer.model, trainer.model.training
    model.eval()
    with torch.no_grad():
        ids = torch.tensor([prompt_ids])
        out = model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False
        )
    model.train(was_training)
    return out[0, ids.shape[1] :].tolist()


def trainer_logprobs(
    trainer: RolloutGRPOTrainer, prompt_ids: list[int], completion: list[int]
) -> torch.Tensor:
    """Teacher-forced fp32 log p of each completion token under the trainer's current model."""
    model, was_training = trainer.model, trainer.model.training
    model.eval()
    with torch.no_grad():
        ids = torch.tensor([prompt_ids + completion])
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    model.train(was_training)
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


class PushRecorder:
    """Wraps the backend's sync_weights: after each push, compares server and trainer."""

    def __init__(self, trainer: RolloutGRPOTrainer, address: str) -> None:
        self.trainer, self.client = trainer, RolloutClient(address)
        self.versions: list[int] = []
        self.greedy_mismatches: list[tuple[list[int], list[int]]] = []
        self.logprob_diffs: list[float] = []
        self.tokenizer = make_tokenizer()
        backend = trainer.vllm_generation
        self._push = backend.sync_weights
        backend.sync_weights = self

    def __call__(self) -> None:
        self._push()
        self.versions.append(int(self.client.server_info().weight_version))
        prompts = [self.tokenizer(p)["input_ids"] for p in PROBE_PROMPTS]
        greedy = self.client.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0))
        sampled = self.client.generate(prompts, SamplingParams(n=2, max_tokens=8, seed=0, logprobs=0))
        for ids, g, s in zip(prompts, greedy, sampled, strict=True):
            expected = trainer_greedy(self.trainer, ids)
            if list(g.outputs[0].token_ids) != expected:
                self.greedy_mismatches.append((list(g.outputs[0].token_ids), expected))
            for sample in s.outputs:
                ours = trainer_logprobs(self.trainer, ids, list(sample.token_ids))
                self.logprob_diffs += (ours - torch.tensor(sample.token_logprobs)).abs().tolist()


@pytest.mark.slow
def test_each_round_pushes_once_and_server_matches_trainer(tmp_path: Path) -> None:
    with running_server(tmp_path) as address:
        trainer = make_trainer(tmp_path, address)
        recorder = PushRecorder(trainer, address)
        trainer.train()
    assert recorder.versions == [1, 2, 3]  # one push per round, the first before round one
    assert recorder.greedy_mismatches == []
    mean_diff = sum(recorder.logprob_diffs) / len(recorder.logprob_diffs)
    trl_diffs = [
        h["sampling/sampling_logp_difference/mean"] for h in trainer.state.log_history if "loss" in h
    ]
    print(f"server vs trainer logprob mean abs diff: {mean_diff:.3e}; TRL's own metric per step: {trl_diffs}")
    assert max(recorder.logprob_diffs) < 1e-4  # every sampled token, not just on average
    assert len(trl_diffs) == 3 and max(trl_diffs) < 1e-4


@pytest.mark.slow
def test_peft_lora_adapters_reach_the_server_merged(tmp_path: Path) -> None:
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    with running_server(tmp_path, seed=0) as address:  # the server starts from the trainer's base weights
        trainer = make_trainer(tmp_path, address, peft_config=lora)
        recorder = PushRecorder(trainer, address)
        trainer.train()
    assert recorder.versions == [1, 2, 3]
    assert recorder.greedy_mismatches == []
    assert max(recorder.logprob_diffs) < 1e-4  # the adapted (merged) model's logprobs, not the base's


def test_unreachable_server_fails_after_wait_timeout(tmp_path: Path) -> None:
    tokenizer = make_tokenizer()
    config = RolloutConfig(server=f"127.0.0.1:{free_port()}", wait_timeout=2.0)
    with pytest.raises(RolloutServerUnavailable, match="rollout serve"):
        RolloutGRPOTrainer(
            make_model(tokenizer),
            length_reward,
            grpo_args(tmp_path, max_steps=3),
            train_dataset=make_dataset(),
            processing_class=tokenizer,
            rollout_config=config,
        )


@pytest.mark.slow
def test_server_with_another_vocabulary_is_refused_at_startup(tmp_path: Path) -> None:
    with (
        running_server(tmp_path, vocab_size=64) as address,
        pytest.raises(RolloutModelMismatch, match="vocab_size"),
    ):
        make_trainer(tmp_path, address)


def test_every_server_is_checked_not_only_the_first(tmp_path: Path) -> None:
    """Two servers, the second hosting another vocabulary: refused at start-up, naming that server."""
    with (
        running_server(tmp_path, seed=1) as good,
        running_server(tmp_path, seed=2, vocab_size=64) as bad,
        pytest.raises(RolloutModelMismatch, match=rf"server {bad}: .*vocab_size"),
    ):
        make_trainer(tmp_path, [good, bad])


def test_a_server_with_another_tokenizer_of_the_same_size_is_refused_by_name(tmp_path: Path) -> None:
    """Same vocabulary size, characters in another order: only the tokenization probe, sent to
    every server, can tell; the second server is named."""
    with (
        running_server(tmp_path, seed=1) as good,
        running_server(tmp_path, seed=2, chars=list(reversed(CHARS))) as bad,
        pytest.raises(RolloutModelMismatch, match=rf"server {bad}: vocabulary mismatch"),
    ):
        make_trainer(tmp_path, [good, bad])


def test_a_single_server_with_another_tokenizer_is_refused_without_an_address_to_tell_apart(tmp_path) -> None:
    model_dir = tmp_path / "reversed_chars"
    tokenizer = make_tokenizer(list(reversed(CHARS)))
    make_model(tokenizer, seed=1).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    server = in_process_server(model_dir)
    try:
        with pytest.raises(RolloutModelMismatch, match=r"^vocabulary mismatch: the server tokenizes"):
            make_trainer(tmp_path, server.address)
    finally:
        server.stop(grace=0.0)


@pytest.mark.slow
def test_restarted_server_gets_weights_again_before_generating(tmp_path: Path) -> None:
    model_dir = save_model_dir(tmp_path / "server_model", seed=1)
    port = free_port()
    address = f"127.0.0.1:{port}"
    servers = [start_server(model_dir, port, tmp_path / "server_0.log")]
    try:
        trainer = make_trainer(tmp_path, address)
        backend = trainer.vllm_generation
        recorder = PushRecorder(trainer, address)  # checks the server after every push, re-pushes included

        def push_then_restart() -> None:
            recorder()
            if len(servers) == 1 and trainer.state.global_step == 1:  # the server forgets push #2
                stop_server(servers[0])
                servers.append(start_server(model_dir, port, tmp_path / "server_1.log"))

        backend.sync_weights = push_then_restart
        trainer.train()
    finally:
        for server in servers:
            stop_server(server)
    assert len(servers) == 2
    # The fresh server was checked again and got push #2 again as version 3 (one above every version
    # the run pushed, so versions never repeat), then push #3 as version 4.
    assert recorder.versions == [1, 2, 3, 4]
    assert recorder.greedy_mismatches == []
    assert max(recorder.logprob_diffs) < 1e-4
    trl_diffs = [h["sampling/sampling_logp_difference/max"] for h in trainer.state.log_history if "loss" in h]
    assert max(trl_diffs) < 1e-4  # no round was sampled from the restarted server's own weights
