"""A real GRPOTrainer trained on trajectories the recorder captured from two-turn agent episodes through the
OpenAI port (official client, token-in, a tool result between the turns): TRL's own teacher-forced logprobs
equal the recorded ones on every model token (`env_mask` 1) and the tool's tokens are masked out, so the
importance ratio is 1. A misaligned export (one token off, an environment token counted as the model's)
would show as a logprob difference of several nats."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")
openai = pytest.importorskip("openai")

from trl_builders import (  # noqa: E402
    grpo_args,
    length_reward,
    logged,
    make_dataset,
    make_model,
    make_tokenizer,
    save_model_dir,
)

from rollout import EngineConfig  # noqa: E402
from rollout.engine_factory import load_engine  # noqa: E402
from rollout.openai.server import OpenAIServer  # noqa: E402
from rollout.server.app import RolloutServer  # noqa: E402
from rollout.server.engine_loop import EngineLoop  # noqa: E402
from rollout.server.weights_servicer import SERVICE_NAME, register_weight_sync  # noqa: E402
from rollout.trajectories import TrajectoryRecorder, trl_batch  # noqa: E402
from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer  # noqa: E402

# Only characters of trl_builders' tokenizer; each turn ends with the EOS token, as many templates do.
TEMPLATE = (
    "{% for m in messages %}{{ m.role }}: {{ m.content or '' }}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def agent_rollout_func(base_url: str, recorder: TrajectoryRecorder):
    """Each prompt: the model answers, a tool answers back, the model answers again (token-in)."""
    client = recorder.wrap(openai.OpenAI(base_url=base_url, api_key="none"))

    def rollout_func(prompts: list[str], trainer: object) -> dict:
        episodes = []
        for prompt in prompts:
            with recorder.episode() as episode:
                messages = [{"role": "user", "content": prompt}]
                first = client.chat.completions.create(
                    model="m", messages=messages, max_tokens=4, temperature=1.0
                )
                tokens = first.model_extra["prompt_token_ids"] + first.choices[0].model_extra["token_ids"]
                messages += [first.choices[0].message.model_dump(exclude_none=True)]
                messages += [{"role": "tool", "tool_call_id": "c", "content": "sunny"}]
                extra = {"prompt_token_ids": tokens}
                client.chat.completions.create(
                    model="m", messages=messages, max_tokens=4, temperature=1.0, extra_body=extra
                )
            episodes.append(episode)
        return trl_batch(episodes)

    return rollout_func


@pytest.mark.slow
def test_trl_trains_on_recorded_agent_trajectories_with_exact_logprobs(tmp_path: Path) -> None:
    engine = load_engine(str(save_model_dir(tmp_path / "served", seed=1)), EngineConfig())
    engine.tokenizer.chat_template = TEMPLATE
    hooks = dict(extra_servicers=[register_weight_sync], extra_service_names=[SERVICE_NAME])
    server = RolloutServer(EngineLoop(engine), **hooks).start()
    http = OpenAIServer(server.loop, server.metrics, served_model_names=["m"]).start()
    recorder = TrajectoryRecorder()
    try:
        tokenizer = make_tokenizer()
        trainer = RolloutGRPOTrainer(
            make_model(tokenizer, seed=0),
            length_reward,
            grpo_args(tmp_path, max_completion_length=64),
            train_dataset=make_dataset(),
            processing_class=tokenizer,
            rollout_func=agent_rollout_func(http.base_url, recorder),
            rollout_config=RolloutConfig(server=server.address, wait_timeout=120),
        )
        trainer.train()
    finally:
        http.stop()
        server.stop(grace=0.0)
    assert all(e.prefix_stable and len(e.turns) == 2 for e in recorder.episodes.values())
    assert len(recorder.episodes) == 8  # 2 steps x a batch of 4 samples
    assert max(logged(trainer, "sampling/sampling_logp_difference/max")) < 1e-4
    assert min(logged(trainer, "sampling/importance_sampling_ratio/min")) > 0.999
