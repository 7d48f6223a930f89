"""Gradients through SamplerReplay: d logp(token) / d logits is the processed distribution's own,
(1[j = token] - p_j) / temperature per logit j, times what the processors do to that logit (the
repetition penalty divides a positive logit of a seen token and multiplies a negative one; additions
pass gradients as they are), zero for what the bans, the grammar and the filters removed."""

from __future__ import annotations

import torch

from rollout import SamplingParams
from rollout.replay import SamplerReplay
from tests.replay.replay_builders import EOS, VOCAB, draw

PENALTY = 1.5
TEMPERATURE = 0.7
BIAS = {11: 3.0, 12: -2.0, 5: 0.5}
PARAMS = SamplingParams(
    max_tokens=64,
    min_tokens=4,
    bad_words_token_ids=[[13], [14, 15]],
    logit_bias=BIAS,
    repetition_penalty=PENALTY,
    frequency_penalty=0.6,
    presence_penalty=0.3,
    temperature=TEMPERATURE,
    top_k=12,
    top_p=0.95,
)


def expected_gradient(
    logits: torch.Tensor, processed: torch.Tensor, prompt, completion, weights
) -> torch.Tensor:
    """d sum_t w_t logp_t / d logits, from the formula in the module docstring."""
    grad = torch.zeros_like(logits)
    for t, token in enumerate(completion):
        seen = set(prompt) | set(completion[:t])
        biased = logits[t] + torch.tensor([BIAS.get(j, 0.0) for j in range(VOCAB)])
        scale = torch.ones(VOCAB)
        for j in seen:
            scale[j] = 1 / PENALTY if biased[j] > 0 else PENALTY
        onehot = torch.nn.functional.one_hot(torch.tensor(token), VOCAB).float()
        grad[t] = weights[t] * scale / TEMPERATURE * (onehot - processed[t].exp())
    return grad


def test_the_gradient_is_the_processed_distributions_own() -> None:
    replay = SamplerReplay(VOCAB, [EOS])
    for seed in range(3):
        sample = draw(PARAMS, seed=seed)
        logits = sample.logits.clone().requires_grad_()
        processed = replay.log_softmax(logits, [(sample.prompt, sample.completion)], PARAMS)
        tokens = torch.tensor(sample.completion)
        weights = torch.linspace(-1.0, 2.0, len(tokens))
        (processed.gather(1, tokens[:, None])[:, 0] * weights).sum().backward()
        expected = expected_gradient(
            sample.logits, processed.detach(), sample.prompt, sample.completion, weights
        )
        assert (expected != 0).sum() >= 20  # not a trivial zero
        torch.testing.assert_close(logits.grad, expected, rtol=1e-5, atol=1e-6)


def test_what_the_bans_and_the_filters_removed_gets_no_gradient() -> None:
    sample = draw(PARAMS, seed=4)
    logits = sample.logits.clone().requires_grad_()
    logps = SamplerReplay(VOCAB, [EOS]).logprobs(logits, sample.prompt, sample.completion, PARAMS)
    logps.sum().backward()
    processed = SamplerReplay(VOCAB, [EOS]).log_softmax(
        sample.logits, [(sample.prompt, sample.completion)], PARAMS
    )
    removed = torch.isneginf(processed)
    assert removed.any() and (logits.grad[removed] == 0).all()
    several = (~removed).sum(dim=1) > 1  # a row that kept one token has probability 1 there: no gradient
    assert several.any() and (logits.grad[several][~removed[several]] != 0).all()
