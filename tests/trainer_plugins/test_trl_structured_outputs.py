"""TRL's structured outputs on a real `rollout serve`: GRPOConfig.vllm_structured_outputs_regex and
generation_kwargs' structured_outputs reach the server with vLLM's meaning (every completion follows
them, with min_tokens and bad_words too), TRL's precedence warning holds, the grammar is replayed on the
trainer's logits (importance-sampling ratio 1), and a bad spec stops start-up naming the field."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("xgrammar")

from trl_builders import free_port, grpo_args, logged, make_tokenizer, serving_model  # noqa: E402

from rollout.sampling_params import SamplingParams  # noqa: E402
from rollout.structured_outputs import StructuredOutputsParams  # noqa: E402
from tests.trainer_plugins.test_trl_logits_processors import make_trainer  # noqa: E402

REGEX = "[0-9]{2}=[a-c]"


@pytest.mark.slow
def test_trls_regex_reaches_the_server_and_every_completion_matches(tmp_path: Path, caplog) -> None:
    kwargs = {"structured_outputs": {"choice": ["ignored"]}}
    with serving_model(tmp_path) as address:
        with caplog.at_level(logging.WARNING, logger="trainer_plugins.trl"):
            args = grpo_args(
                tmp_path, max_steps=1, vllm_structured_outputs_regex=REGEX, generation_kwargs=kwargs
            )
            trainer = make_trainer(args, address)
        backend, request, sent, batches = trainer.vllm_generation, trainer.vllm_generation._request, [], []
        sampling_params = backend.sampling_params
        backend.sampling_params = lambda *a, **k: sent.append(sampling_params(*a, **k)) or sent[-1]
        backend._request = lambda *a: batches.append(request(*a)) or batches[-1]
        trainer.train()
    params: SamplingParams = sent[-1]
    assert params.structured_outputs == StructuredOutputsParams(regex=REGEX)  # TRL's precedence
    tokenizer = make_tokenizer()
    texts = [tokenizer.decode(c, skip_special_tokens=True) for b in batches for c in b.completion_ids]
    assert texts and all(re.fullmatch(REGEX, t) for t in texts), texts
    assert "takes precedence" in caplog.text
    ratios = logged(trainer, "sampling/importance_sampling_ratio/min") + logged(
        trainer, "sampling/importance_sampling_ratio/max"
    )
    assert ratios and all(abs(r - 1) <= 1e-3 for r in ratios), ratios


@pytest.mark.slow
def test_a_regex_with_min_tokens_and_bad_words_gives_completions_that_follow_all_three(
    tmp_path: Path,
) -> None:
    """A GRPO config moved from vLLM: the grammar and the bans together, not refused."""
    kwargs = {"min_tokens": 4, "bad_words": ["ab"]}
    with serving_model(tmp_path) as address:
        args = grpo_args(
            tmp_path, max_steps=1, vllm_structured_outputs_regex="[a-c]{2,6}", generation_kwargs=kwargs
        )
        trainer = make_trainer(args, address)
        backend, request, batches = trainer.vllm_generation, trainer.vllm_generation._request, []
        backend._request = lambda *a: batches.append(request(*a)) or batches[-1]
        trainer.train()
    tokenizer = make_tokenizer()
    texts = [tokenizer.decode(c, skip_special_tokens=True) for b in batches for c in b.completion_ids]
    assert texts and all(re.fullmatch("[a-c]{4,6}", t) and "ab" not in t for t in texts), texts
    assert abs(logged(trainer, "sampling/importance_sampling_ratio/min")[0] - 1) <= 1e-3


def test_an_unknown_structured_outputs_key_stops_start_up_naming_it(tmp_path: Path) -> None:
    args = grpo_args(tmp_path, generation_kwargs={"structured_outputs": {"regexp": "a"}})
    with pytest.raises(ValueError, match="structured_outputs: unknown key 'regexp'"):
        make_trainer(args, f"127.0.0.1:{free_port()}", wait_timeout=1.0)
