"""Parity probe: a few server samples scored by the trainer's own model, after a first push.

The config comparison catches known settings; the probe catches everything else (custom code, a
setting the comparison skips, a server keeping tensors the trainer never pushes). Logprobs are
compared unscaled ("raw" on the server, plain log-softmax in the trainer), so sampling settings
cannot hide or cause a difference; the tolerance is the numerical noise of the lowest precision
either side computes in: the trainer's under its mixed-precision autocast (GRPOConfig(bf16=True)),
not its parameters' dtype. An image-text model is also probed on a prompt with an image
(probe_prompts.py), its mean checked on its own so the text prompts cannot dilute a vision-tower mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rollout.outputs import CompletionOutput
from rollout.sampling_params import SamplingParams

from .probe_prompts import ProbePrompts, forward_inputs
from .server_checks import RolloutModelMismatch

PROBE_TOKENS = 8

# Mean |server - trainer| per token, in nats, within which two implementations of one model agree.
TOLERANCE_BY_DTYPE = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 6e-2}
# accelerate's mixed_precision setting -> the dtype its autocast computes the forward pass in.
AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


class ParityMismatch(RolloutModelMismatch):
    """The server's logprobs for its own samples are not the trainer's: it serves another policy."""


@dataclass(frozen=True)
class ProbeSample:
    prompt_ids: list[int]
    completion_ids: list[int]
    server_logprobs: list[float]
    model_inputs: dict[str, torch.Tensor] | None = None  # an image prompt's processor tensors


def probe_params() -> SamplingParams:
    return SamplingParams(
        n=2,
        max_tokens=PROBE_TOKENS,
        temperature=1.0,
        seed=0,
        ignore_eos=True,
        logprobs=0,
        logprobs_mode="raw",
    )


def probe_samples(prompts: ProbePrompts, outputs: list[list[CompletionOutput]]) -> list[ProbeSample]:
    return [
        ProbeSample(list(ids), list(sample.token_ids), list(sample.token_logprobs), inputs)
        for ids, inputs, samples in zip(prompts.prompt_ids, prompts.model_inputs, outputs, strict=True)
        for sample in samples
        if sample.token_ids
    ]


def trainer_logprobs(model: torch.nn.Module, sample: ProbeSample) -> torch.Tensor:
    """fp32 log-softmax of the trainer's unscaled logits at each completion token (teacher forced)."""
    param = next(model.parameters())
    device = param.device
    ids = torch.tensor([sample.prompt_ids + sample.completion_ids], device=device)
    extras = forward_inputs(sample.model_inputs, ids.shape[1], device, param.dtype)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), **extras).logits
    finally:
        model.train(was_training)
    start = len(sample.prompt_ids) - 1
    logps = logits[0, start : start + len(sample.completion_ids)].float().log_softmax(-1)
    return logps.gather(-1, torch.tensor(sample.completion_ids, device=device)[:, None])[:, 0].cpu()


@dataclass(frozen=True)
class Precision:
    """The dtypes the trainer's forward pass (autocast included) and the server compute in."""

    trainer: str
    server: str
    autocast: bool  # the trainer's dtype comes from mixed-precision autocast

    @classmethod
    def of(cls, model: torch.nn.Module, accelerator: Any, server_dtype: torch.dtype | None) -> Precision:
        params = str(next(model.parameters()).dtype).removeprefix("torch.")
        autocast = AUTOCAST_DTYPES.get(str(getattr(accelerator, "mixed_precision", "no")))
        trainer = autocast if autocast and _noise(autocast) > _noise(params) else params
        server = str(server_dtype).removeprefix("torch.") if server_dtype is not None else params
        return cls(trainer, server, trainer != params)

    def tolerance(self, configured: float | None) -> float:
        """The configured value, else the noise level of the less precise side."""
        return configured if configured is not None else max(_noise(self.trainer), _noise(self.server))

    def __str__(self) -> str:
        how = " (mixed-precision autocast)" if self.autocast else ""
        return f"trainer computes in {self.trainer}{how}, server in {self.server}"


def _noise(dtype: str) -> float:
    return TOLERANCE_BY_DTYPE.get(dtype, TOLERANCE_BY_DTYPE["bfloat16"])


def compare(
    model: torch.nn.Module, samples: list[ProbeSample], limit: float, where: str, precision: Precision
) -> tuple[float, float]:
    """(mean, max) |difference| per token; raises ParityMismatch when the mean, or the image samples' own
    mean, is above `limit`."""
    per_sample = [(trainer_logprobs(model, s) - torch.tensor(s.server_logprobs)).abs() for s in samples]
    diffs = torch.cat(per_sample)
    mean, worst = diffs.mean().item(), diffs.max().item()
    with_image = [d for d, s in zip(per_sample, samples, strict=True) if s.model_inputs is not None]
    on = ""
    if with_image and torch.cat(with_image).mean().item() > mean:
        mean, on = torch.cat(with_image).mean().item(), " on the prompt with an image"
    if not mean <= limit:
        raise ParityMismatch(
            f"parity probe failed {where}: the server's logprobs for its own samples differ from the trainer's "
            f"by {mean:.3g} nats per token on average{on} (max {worst:.3g}), more than the {limit:.3g} that "
            f"numerical noise explains when the {precision}. The server most likely runs another model or "
            "config than the trainer (weights the trainer never pushes, such as an untied lm_head or a vision "
            "tower; a setting the config comparison skips; custom code): serve the trainer's checkpoint with the same config. "
            "RolloutConfig.parity_tolerance sets the limit, parity_probe=False skips the probe."
        )
    return mean, worst
