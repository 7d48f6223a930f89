"""RolloutGRPOTrainer's backend against an in-process client: layout, pushes, restarts, settings.

`LocalClient` answers like `RolloutClient` from an offline `rollout.LLM`, so these run in seconds;
test_trl_grpo.py repeats the end-to-end properties against a real server process.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("trl")

from trl import GRPOConfig  # noqa: E402
from trl_builders import length_reward, make_dataset, make_model, make_tokenizer  # noqa: E402

from rollout import LLM  # noqa: E402
from rollout.outputs import CompletionOutput, RequestOutput  # noqa: E402
from rollout.sampling_params import SamplingParams  # noqa: E402
from trainer_plugins.trl import RolloutBatch, RolloutConfig, RolloutGRPOTrainer, server_checks  # noqa: E402
from trainer_plugins.trl.generation import StaleWeightsError  # noqa: E402


class LocalClient:
    """RolloutClient's surface over an in-process LLM; `restart()` forgets pushed weights."""

    def __init__(self, target: str | list[str], token: str | None = None, tls: object = None) -> None:
        self.addresses = ["local"]
        self.tokenizer = make_tokenizer()
        self.boots = -1  # restarts, as a RolloutClient counts them from boot ids
        self.boot_ids = SimpleNamespace(restarts=lambda: {"local": self.boots})
        self.dead_servers: dict[str, str] = {}
        self.restart()
        self.calls: list[tuple[int, SamplingParams]] = []
        self.in_flight_policies: list[str] = []
        self.down = False  # a server that died and does not come back
        self.before_generate = lambda params: None  # e.g. another writer pushing its own weights

    def restart(self) -> None:
        self.llm = LLM(model=make_model(self.tokenizer, seed=1), tokenizer=self.tokenizer)
        self.boots += 1

    def wait_until_ready(self, timeout: float) -> None:
        if self.down:
            raise TimeoutError(f"server local not SERVING after {timeout} s")

    def server_info(self, address: str | None = None) -> SimpleNamespace:
        info = self.llm.engine.model_info
        return SimpleNamespace(
            weight_version=self.llm.weight_version,
            vocab_size=info.vocab_size,
            architecture=None,
            dtype=info.dtype,
            max_model_len=info.max_model_len,
            model_config=self.llm.engine.model.config.to_json_string(use_diff=False),
        )

    def generate(self, prompts: list, params: SamplingParams) -> list[RequestOutput]:
        self.calls.append((len(prompts), params))
        self.before_generate(params)
        return self.llm.generate(prompts, params)

    def update_weights(
        self,
        named_tensors: list,
        transport: str = "grpc",
        version: int | None = None,
        in_flight: str = "wait",
        lora: object = None,
    ) -> int:
        self.in_flight_policies.append(in_flight)
        return self.llm.update_weights(named_tensors, version, in_flight=in_flight, lora=lora)


def make_trainer(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    rollout_config: RolloutConfig | None = None,
    **config: object,
) -> RolloutGRPOTrainer:
    monkeypatch.setattr(server_checks, "RolloutClient", LocalClient)
    tokenizer = make_tokenizer()
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        max_steps=3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        bf16=False,
        use_cpu=True,
        **config,
    )
    return RolloutGRPOTrainer(
        make_model(tokenizer),
        length_reward,
        args,
        train_dataset=make_dataset(),
        processing_class=tokenizer,
        rollout_config=rollout_config,
    )


def test_pushes_use_the_configured_in_flight_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = make_trainer(tmp_path, monkeypatch, RolloutConfig(in_flight="recompute", parity_probe=False))
    trainer.train()
    assert trainer.rollout_client.in_flight_policies == ["recompute"] * 3


def sample(index: int, version: int) -> CompletionOutput:
    return CompletionOutput(index, [index], [-1.0], None, "length", version)


def test_batch_keeps_prompt_order_with_a_prompts_samples_consecutive() -> None:
    outputs = [RequestOutput(f"r{p}", [p], [sample(i + 10 * p, 1) for i in range(2)], True) for p in range(2)]
    batch = RolloutBatch.of(outputs, n=2, accepted_versions={1})
    assert batch.prompt_ids == [[0], [1]]
    assert batch.completion_ids == [[0], [1], [10], [11]]
    assert not batch.stale


def test_batch_is_stale_when_any_sample_has_another_version() -> None:
    outputs = [RequestOutput("r", [0], [sample(0, 2), sample(1, 1)], True)]
    assert RolloutBatch.of(outputs, n=2, accepted_versions={2}).stale


def test_each_prompt_is_requested_once_with_n_and_grpo_sampling_settings(tmp_path, monkeypatch) -> None:
    trainer = make_trainer(tmp_path, monkeypatch, temperature=0.7, top_p=0.9, top_k=5, repetition_penalty=1.1)
    trainer.train()
    client = trainer.rollout_client
    # the first call is the start-up vocabulary probe, the second the parity probe after the first push
    assert client.calls[1][1].logprobs_mode == "raw_logprobs"
    rounds = client.calls[2:]
    assert client.llm.weight_version == 3  # one push per round
    assert [num_prompts for num_prompts, _ in rounds] == [2, 2, 2]  # 8 samples = 2 prompts x n=4
    params = rounds[0][1]
    assert (params.n, params.max_tokens, params.temperature, params.top_p, params.top_k) == (
        4,
        8,
        0.7,
        0.9,
        5,
    )
    assert (params.repetition_penalty, params.logprobs, params.logprobs_mode) == (
        1.1,
        0,
        "processed_logprobs",
    )


def test_a_server_that_lost_the_weights_gets_them_again_before_generating(tmp_path, monkeypatch) -> None:
    trainer = make_trainer(tmp_path, monkeypatch)
    backend = trainer.vllm_generation
    push, pushes = backend.sync_weights, []

    def push_then_restart() -> None:
        push()
        pushes.append(backend.pushed_version)
        if len(pushes) == 2:
            backend.client.restart()

    backend.sync_weights = push_then_restart
    trainer.train()
    assert pushes == [1, 2, 3, 4]  # the restarted server got push 2 again (as version 3), then push 3
    diffs = [h["sampling/sampling_logp_difference/max"] for h in trainer.state.log_history if "loss" in h]
    assert max(diffs) < 1e-4  # no round sampled from the restarted server's own weights


def test_a_server_that_dies_for_good_mid_training_is_a_clear_error(tmp_path, monkeypatch) -> None:
    trainer = make_trainer(tmp_path, monkeypatch)
    backend = trainer.vllm_generation
    push = backend.sync_weights

    def push_then_die() -> None:
        push()
        backend.client.down = True

    backend.sync_weights = push_then_die
    with pytest.raises(
        server_checks.RolloutServerUnavailable, match="no rollout server ready at 127.0.0.1:50051"
    ):
        trainer.train()
    assert backend.pushed_version == 1 and trainer.state.global_step == 0  # nothing trained on stale samples


def test_another_writer_pushing_every_round_is_refused_not_trained_on(tmp_path, monkeypatch) -> None:
    trainer = make_trainer(tmp_path, monkeypatch)
    client = trainer.rollout_client
    intruder = list(make_model(make_tokenizer(), seed=7).named_parameters())
    # before every round's request, not the parity probe's (which would catch it first)
    client.before_generate = lambda params: params.n == 4 and client.llm.update_weights(intruder)
    with pytest.raises(StaleWeightsError, match="another trainer pushing"):
        trainer.train()
    assert trainer.state.global_step == 0


def test_generation_kwargs_without_a_rollout_equivalent_are_refused(tmp_path, monkeypatch) -> None:
    with pytest.raises(ValueError, match="truncate_prompt_tokens"):  # presence_penalty maps now (issue 30)
        make_trainer(tmp_path, monkeypatch, generation_kwargs={"truncate_prompt_tokens": 8})


def test_config_names_the_bad_field() -> None:
    with pytest.raises(ValueError, match="transport"):
        RolloutConfig(transport="carrier-pigeon")
