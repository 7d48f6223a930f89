"""LLM: the offline entry point; generate a batch to completion in-process."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Mapping, Sequence

import torch
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rollout.config import EngineConfig
from rollout.engine.llm_engine import LLMEngine
from rollout.engine.resume import aborted_samples, merge_resumed, single_sample
from rollout.outputs import RequestOutput
from rollout.sampling_params import SamplingParams
from rollout.server.prompts import check_text_chars, text_char_limit

Prompt = str | list[int]


class LLM:
    """`LLM("path")`, `LLM(model=<PreTrainedModel>, tokenizer=...)`, or `LLM()` for the embedded model."""

    def __init__(
        self,
        model: str | os.PathLike | PreTrainedModel | None = None,
        tokenizer: PreTrainedTokenizerBase | str | None = None,
        config: EngineConfig | None = None,
    ) -> None:
        if model is None:
            from rollout.assets import default_model_path

            model = default_model_path()
        if isinstance(model, PreTrainedModel):
            from rollout.engine.model_loader import resolve_tokenizer

            self.engine = LLMEngine(model, resolve_tokenizer(tokenizer), config)
        else:
            self.engine = LLMEngine.from_pretrained(model, config, tokenizer)
        self._ids = itertools.count()
        self._text_chars: int | None = None

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase | None:
        return self.engine.tokenizer

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = False,
    ) -> list[RequestOutput]:
        """Generates every prompt's n samples; returns them in prompt order, samples in index order.

        `params` is one SamplingParams for every prompt, or one per prompt (as in vLLM).
        """
        token_prompts = self._tokenize(prompts)
        per_prompt = _params_per_prompt(params, len(token_prompts))
        for ids, p in zip(token_prompts, per_prompt, strict=True):  # validate all before queueing any
            self.engine.validate_request(ids, p)
        request_ids = [f"llm-{next(self._ids)}" for _ in token_prompts]
        texts = prompts if isinstance(prompts, list) and prompts and isinstance(prompts[0], str) else None
        for i, (request_id, ids) in enumerate(zip(request_ids, token_prompts, strict=True)):
            self.engine.add_request(request_id, ids, per_prompt[i], texts[i] if texts else None)
        return self._run(request_ids, use_tqdm)

    def _run(self, request_ids: list[str], use_tqdm: bool) -> list[RequestOutput]:
        results: dict[str, RequestOutput] = {}
        pending = set(request_ids)
        with tqdm(total=len(request_ids), disable=not use_tqdm, desc="generate", unit="prompt") as bar:
            while pending:
                for delta in self.engine.step():
                    result = results.setdefault(delta.request_id, delta)
                    if result is not delta:
                        result.outputs.extend(delta.outputs)
                        result.finished = delta.finished
                    if delta.finished:
                        pending.discard(delta.request_id)
                        bar.update(1)
        for result in results.values():
            result.outputs.sort(key=lambda c: c.index)
        return [results[r] for r in request_ids]

    def _tokenize(self, prompts: Prompt | Sequence[Prompt]) -> list[list[int]]:
        if isinstance(prompts, str):
            prompts = [prompts]
        if not isinstance(prompts, (list, tuple)):
            raise ValueError(
                f"prompts must be a list of strings or of token-id lists, got {type(prompts).__name__}"
            )
        if prompts and all(isinstance(p, int) for p in prompts):
            raise ValueError("prompts must be a list of prompts; wrap a single token-id prompt as [[...]]")
        out = []
        for i, prompt in enumerate(prompts):
            if isinstance(prompt, str):
                if self.tokenizer is None:
                    raise ValueError(f"prompts[{i}] is text but the model has no tokenizer; pass token ids")
                check_text_chars(len(prompt), self.max_prompt_chars, f"prompts[{i}]")
                out.append(self.tokenizer(prompt)["input_ids"])
            elif isinstance(prompt, (list, tuple)):
                out.append(list(prompt))
            else:
                raise ValueError(
                    f"prompts[{i}] must be a string or a list of token ids, got {type(prompt).__name__}"
                )
        return out

    def resume_aborted(
        self, outputs: list[RequestOutput], params: SamplingParams, use_tqdm: bool = False
    ) -> list[RequestOutput]:
        """`outputs` with every aborted sample continued to completion under the current weights.

        `params` are the ones the samples were started with (`max_tokens` counts the tokens they
        already have); the other samples are returned as they are.
        """
        todo = aborted_samples(outputs)
        single = single_sample(params)
        for job in todo:  # validate all before queueing any
            self.engine.validate_request(job.prompt_token_ids, single, job.partial)
        request_ids = [f"llm-{next(self._ids)}" for _ in todo]
        for request_id, job in zip(request_ids, todo, strict=True):
            self.engine.add_request(request_id, job.prompt_token_ids, single, resume=job.partial)
        resumed = [out.outputs[0] for out in self._run(request_ids, use_tqdm)]
        return merge_resumed(outputs, todo, resumed)

    @property
    def max_prompt_chars(self) -> int:
        """Longer texts cannot fit the context; they are refused before tokenizing."""
        if self._text_chars is None:
            self._text_chars = text_char_limit(self.tokenizer, self.engine.max_model_len)
        return self._text_chars

    def update_weights(
        self,
        named_tensors: Iterable[tuple[str, torch.Tensor]] | Mapping[str, torch.Tensor],
        version: int | None = None,
        in_flight: str = "wait",
    ) -> int:
        """Atomic in-place update; `in_flight` ("wait" | "abort" | "keep" | "recompute") applies to
        requests left in `self.engine` (see rollout/engine/in_flight.py)."""
        return self.engine.update_weights(named_tensors, version, in_flight)

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    def reset_prefix_cache(self) -> None:
        self.engine.reset_prefix_cache()

    def stats(self) -> dict[str, int | float]:
        return self.engine.stats()


def _params_per_prompt(
    params: SamplingParams | Sequence[SamplingParams] | None, num_prompts: int
) -> list[SamplingParams]:
    if params is None or isinstance(params, SamplingParams):
        return [params or SamplingParams()] * num_prompts
    if not isinstance(params, (list, tuple)):
        raise ValueError(f"params must be SamplingParams or a list of them, got {type(params).__name__}")
    if len(params) != num_prompts:
        raise ValueError(
            f"params: {len(params)} SamplingParams for {num_prompts} prompts; give one or one per prompt"
        )
    return list(params)
