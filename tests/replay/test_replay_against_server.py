"""SamplerReplay on a trainer's own logits against a real gRPC server: for every setting, alone and all
together, the processed logprob the replay gives each sampled token from a teacher-forced transformers
forward equals the one the server returned with it (fp32, within 1e-5)."""

from __future__ import annotations

import pytest
import torch

from rollout import SamplingParams
from rollout.replay import SamplerReplay
from rollout.structured_outputs import StructuredOutputsParams
from tests.builders import char_tokenizer, tiny_model
from tests.replay.test_sampler_replay import SETTINGS
from tests.server.server_builders import client_for, make_engine, serving

PROMPTS = ["abcab", "hello world", "zz"]
SERVER_SETTINGS = {
    **{name: settings for name, settings in SETTINGS.items() if name != "greedy"},
    "bad_words_strings": dict(bad_words=["ab", "c", "hel"]),
    "regex": dict(structured_outputs=StructuredOutputsParams(regex="[a-e]{2,6} [f-k]{1,3}")),
    "regex_and_everything": dict(
        SETTINGS["everything"],
        allowed_token_ids=None,
        bad_words_token_ids=[[5]],
        structured_outputs=StructuredOutputsParams(regex="[a-e]{3,6} [f-k]{1,3}"),
    ),
}


def trainer_logits(model: torch.nn.Module, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """[T, vocab]: the logits that predict each completion token, teacher forced."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0]
    return logits[len(prompt) - 1 : -1]


@pytest.mark.parametrize("name", SERVER_SETTINGS)
def test_replay_on_the_trainers_logits_equals_the_servers_processed_logprobs(name: str) -> None:
    if "structured_outputs" in SERVER_SETTINGS[name]:
        pytest.importorskip("xgrammar")
    params = SamplingParams(n=4, max_tokens=12, seed=3, logprobs=0, **SERVER_SETTINGS[name])
    tokenizer = char_tokenizer()
    trainer_model = tiny_model("llama", 0)
    with serving(make_engine(seed=0, tokenizer=tokenizer)) as server, client_for(server) as client:
        outputs = client.generate(PROMPTS, params)
        replay = SamplerReplay.for_server(client.server_info(), tokenizer)
    worst, count = 0.0, 0
    for output in outputs:
        for sample in output.outputs:
            prompt, completion = list(output.prompt_token_ids), list(sample.token_ids)
            logits = trainer_logits(trainer_model, prompt, completion)
            got = replay.logprobs(logits, prompt, completion, params)
            worst = max(worst, (got - torch.tensor(sample.token_logprobs)).abs().max().item())
            count += len(completion)
    assert count > 20 and worst <= 1e-5, (name, worst)
