"""The TRL plugin's async mode against a real `rollout serve` process: overlap, lag, behaviour logprobs.

Round t+1 must be submitted before the trainer's step t and used at step t+1 (so it generated while
step t trained), no round older than `max_lag` pushes may be trained on, and the logprobs handed to
TRL's importance-sampling correction must be each token's logprob under the weights that sampled it
(teacher-forced with a copy of the weights of that pushed version).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from trl_builders import (  # noqa: E402
    grpo_args,
    in_process_server,
    length_reward,
    logged,
    make_dataset,
    make_model,
    make_tokenizer,
    save_model_dir,
    serving_model,
)

from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer  # noqa: E402
from trainer_plugins.trl.async_rounds import LookaheadLoader  # noqa: E402

STARTUP_TIMEOUT = 600.0  # a hang guard: a server start is a minute on 2 busy cores


def test_async_config_is_validated_by_field() -> None:
    with pytest.raises(ValueError, match="in_flight"):
        RolloutConfig(in_flight="later")
    with pytest.raises(ValueError, match='in_flight="abort"'):
        RolloutConfig(async_generation=True, in_flight="abort")
    with pytest.raises(ValueError, match="max_lag"):
        RolloutConfig(async_generation=True, max_lag=0)
    RolloutConfig(in_flight="abort")  # synchronous rounds have nothing in flight to cut


def test_lookahead_loader_yields_the_same_batches_and_peeks_ahead() -> None:
    loader = LookaheadLoader([[0], [1], [2], [3]])
    seen = []
    for batch in loader:
        seen.append(batch)
        if batch == [1]:
            assert loader.peek(1) == [2] and loader.peek(2) == [3] and loader.peek(3) is None
    assert seen == [[0], [1], [2], [3]]
    assert list(loader) == seen  # a new epoch starts over


class Recorder:
    """Snapshots the trainer's weights at every push and the batches handed to TRL."""

    def __init__(self, trainer: RolloutGRPOTrainer) -> None:
        self.weights: dict[int, dict[str, torch.Tensor]] = {}
        self.rounds: list[tuple[list[list[int]], list[list[int]], list[list[float]]]] = []
        backend = trainer.vllm_generation
        push, generate = backend._push, backend.generate

        def recorded_push() -> None:
            push()
            state = trainer.model.state_dict()
            self.weights[backend.pushed_version] = {k: v.detach().clone() for k, v in state.items()}

        def recorded_generate(prompts, images, num_generations, profiler=None):
            out = generate(prompts, images, num_generations, profiler)
            self.rounds.append((out[0], out[1], [[lp[0] for lp in seq] for seq in out[2]]))
            return out

        backend._push, backend.generate = recorded_push, recorded_generate


def _train(tmp_path: Path, address: str, in_flight: str) -> tuple[RolloutGRPOTrainer, Recorder]:
    tokenizer = make_tokenizer()
    trainer = RolloutGRPOTrainer(
        make_model(tokenizer, seed=0),
        length_reward,
        grpo_args(tmp_path, max_steps=4),
        train_dataset=make_dataset(16),
        processing_class=tokenizer,
        rollout_config=RolloutConfig(
            server=address, wait_timeout=STARTUP_TIMEOUT, async_generation=True, in_flight=in_flight
        ),
    )
    recorder = Recorder(trainer)
    trainer.train()
    return trainer, recorder


@pytest.mark.slow
@pytest.mark.parametrize("in_flight", ["wait", "keep"])
def test_async_rounds_overlap_stay_within_the_lag_and_carry_behaviour_logprobs(
    tmp_path: Path, in_flight: str
) -> None:
    with serving_model(tmp_path) as address:
        trainer, recorder = _train(tmp_path, address, in_flight)
    events = trainer.async_rounds.events
    kinds = [e.kind for e in events]
    assert kinds[0] == "fresh" and kinds.count("used") == 3, kinds  # rounds 1-3 came from the lookahead
    for submitted, used in zip(
        [e for e in events if e.kind == "submitted"], [e for e in events if e.kind == "used"], strict=False
    ):
        assert used.global_step == submitted.global_step + 1  # generated while that step trained
    pushed = trainer.vllm_generation.pushed_versions
    assert pushed == sorted(pushed) and len(pushed) == 4
    for event in events:
        if event.kind == "used":  # at step s the trainer pushed pushed[s]; max_lag=1 allows pushed[s-1]
            assert min(event.versions) >= pushed[event.global_step - 1], (event, pushed)
    # TRL saw off-policy tokens (its own metric of |trainer logp - sampling logp| is not ~0) ...
    assert max(logged(trainer, "sampling/sampling_logp_difference/mean")[1:]) > 1e-3
    # ... and every logprob it was handed is the token's logprob under the weights that sampled it.
    model = make_model(make_tokenizer(), seed=0).eval()
    backend = trainer.vllm_generation
    worst = 0.0
    for (prompt_ids, completion_ids, logprobs), event in zip(
        recorder.rounds, [e for e in events if e.kind in ("used", "fresh")], strict=True
    ):
        version = min(event.versions) if event.versions else backend.pushed_versions[0]
        if in_flight == "keep" and len(set(event.versions)) > 1:
            continue  # several versions in one round: per-token spans, checked in the engine's tests
        model.load_state_dict(recorder.weights[version])
        for prompt, completion, lps in zip(prompt_ids, completion_ids, logprobs, strict=True):
            ids = torch.tensor([prompt + completion])
            with torch.no_grad():
                logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
            want = logits.log_softmax(-1).gather(1, torch.tensor(completion)[:, None])[:, 0]
            worst = max(worst, (want - torch.tensor(lps)).abs().max().item())
    assert worst <= 1e-4


def test_with_tools_no_round_is_prefetched_and_the_start_up_says_so(tmp_path: Path, caplog) -> None:
    """TRL asks for a tool turn's prompts only after the previous turn's tools ran: nothing to prefetch."""
    server = in_process_server(save_model_dir(tmp_path / "served", seed=1))
    tokenizer = make_tokenizer()
    try:
        trainer = RolloutGRPOTrainer(
            make_model(tokenizer, seed=0),
            length_reward,
            grpo_args(tmp_path),
            train_dataset=make_dataset(),
            processing_class=tokenizer,
            rollout_config=RolloutConfig(server=server.address, async_generation=True),
        )
        trainer.tools = [len]  # what GRPOTrainer(tools=[...]) sets
        with caplog.at_level(logging.WARNING, logger="trainer_plugins.trl"):
            assert trainer._async_rounds() is None
    finally:
        server.stop(grace=0.0)
    assert "async_generation has no effect with tools" in caplog.text
