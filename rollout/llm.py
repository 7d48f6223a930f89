"""LLM: the offline entry point; generate a batch to completion in-process.

One `LLM` may be shared by threads: its calls take turns (a lock), since the engine beneath is
driven by one caller at a time. vLLM's names work too (`sampling_params=`, engine keywords such as
`max_model_len=`, `LLM.chat`); docs/engine_api.md lists what differs from vLLM.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rollout.config import EngineConfig
from rollout.detokenize.logprob_tokens import with_decoded_tokens
from rollout.engine.llm_engine import LLMEngine
from rollout.engine.versions.direct_write_watch import DirectWriteWatch
from rollout.engine_factory import load_engine
from rollout.inputs.chat_render import chat_prompts, template_content_format
from rollout.inputs.chat_template_options import ChatTemplateOptions
from rollout.inputs.prompt_ids import prompt_ids, prompt_texts
from rollout.inputs.prompt_inputs import PromptType, check_lora_request, check_priority, parse_prompts
from rollout.inputs.tokenization_kwargs import tokenization_options
from rollout.multimodal.llm_images import image_prompts
from rollout.multimodal.mm_inputs import MultiModalInputs
from rollout.multimodal.prompt_dicts import has_multi_modal_data
from rollout.outputs import RequestOutput
from rollout.protocol.chat_messages import is_conversation, tools_json
from rollout.protocol.prompts import text_char_limit
from rollout.resumption import aborted_samples, merge_resumed, single_sample
from rollout.sampling_params.sampling_params import SamplingParams, params_or_sampling_params
from rollout.scoring import ScoreOutput, check_sequences, score_output, score_params
from rollout.weights.lora import LoraTargets
from rollout.weights.lora_export import update_source

Params = SamplingParams | Sequence[SamplingParams] | None
_CONFIG_FIELDS = {f.name for f in dataclasses.fields(EngineConfig)}


class LLM:
    """`LLM("path")`, `LLM(model=<PreTrainedModel>, tokenizer=...)`, or `LLM()` for the embedded model.

    EngineConfig fields may also be given as keywords, as vLLM takes them
    (`LLM("path", max_model_len=2048, dtype="bfloat16", seed=0)`); they override `config`'s.
    Calls from several threads take turns: each runs to completion before the next starts.
    """

    def __init__(
        self,
        model: str | os.PathLike | PreTrainedModel | None = None,
        tokenizer: PreTrainedTokenizerBase | str | None = None,
        config: EngineConfig | None = None,
        **engine_kwargs: Any,
    ) -> None:
        config = _with_engine_kwargs(config, engine_kwargs)
        if model is None:
            from rollout.assets import default_model_path

            model = default_model_path()
        if isinstance(model, PreTrainedModel):
            from rollout.engine.model.model_loader import resolve_tokenizer

            self.engine = LLMEngine(model, resolve_tokenizer(tokenizer), config)
        else:
            self.engine = load_engine(model, config, tokenizer)
        self._ids = itertools.count()
        self._text_chars: int | None = None
        self._lock = threading.Lock()  # the engine has one driver: concurrent calls take turns
        self._writes = DirectWriteWatch(self.engine.model, self.engine.weight_version)
        self._base_version = self.engine.adapters.base_version  # what this LLM's updates left, or as loaded
        self.memory = self.engine.memory  # sleep mode (rollout/engine/sleep/)

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase | None:
        return self.engine.tokenizer

    def get_tokenizer(self) -> PreTrainedTokenizerBase | None:
        """vLLM's name for `tokenizer` (None: the model serves token ids only)."""
        return self.engine.tokenizer

    def generate(
        self,
        prompts: PromptType | Sequence[PromptType],
        params: Params = None,
        use_tqdm: bool | Callable[..., Any] = False,
        *,
        sampling_params: Params = None,
        lora_request: object = None,
        priority: list[int] | None = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
    ) -> list[RequestOutput]:
        """Generates every prompt's n samples; returns them in prompt order, samples in index order.

        `prompts`: strings, token-id lists, or vLLM's TextPrompt / TokensPrompt dicts (prompt_inputs.py).
        `params` (or vLLM's name, `sampling_params`) is one SamplingParams for every prompt, or one
        per prompt. A text prompt is tokenized with the tokenizer's special tokens, but never gets a
        second BOS when it already starts with one (a chat template rendered to text).
        `tokenization_kwargs` and `priority` as vLLM's (inputs/tokenization_kwargs.py; only priority 0:
        inputs/prompt_inputs.py check_priority); `use_tqdm` may be a tqdm factory, as vLLM's.
        """
        params = params_or_sampling_params(params, sampling_params)
        check_lora_request(lora_request)
        options = tokenization_options(
            tokenization_kwargs, chat=False, max_model_len=self.engine.max_model_len
        )
        if isinstance(prompts, (str, Mapping)):
            prompts = [prompts]
        if isinstance(prompts, (list, tuple)) and any(has_multi_modal_data(p) for p in prompts):
            check_priority(priority, len(prompts))
            if options is not None:
                raise ValueError("tokenization_kwargs: not supported with multi_modal_data prompts")
            ids, texts, images = image_prompts(self, prompts)  # rollout/multimodal/llm_images.py
            return self._generate_ids(ids, params, texts, use_tqdm, images)
        inputs = parse_prompts(prompts)
        check_priority(priority, len(inputs))
        ids = prompt_ids(
            self.tokenizer, inputs, options, lambda: self.max_prompt_chars
        )  # inputs/prompt_ids.py
        return self._generate_ids(ids, params, prompt_texts(self.tokenizer, inputs, options), use_tqdm)

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]] | Sequence[Sequence[Mapping[str, Any]]],
        params: Params = None,
        use_tqdm: bool | Callable[..., Any] = False,
        lora_request: object = None,
        chat_template: str | None = None,
        chat_template_content_format: str | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
        mm_processor_kwargs: Mapping[str, Any] | None = None,
        *,
        sampling_params: Params = None,
    ) -> list[RequestOutput]:
        """vLLM's `LLM.chat` (its arguments in its order): one conversation or a list of them, rendered with
        the tokenizer's chat template (or `chat_template`; generation prompt appended unless
        `add_generation_prompt=False`, `continue_final_message`, `chat_template_kwargs` and `tools` passed
        to it), then generated.

        Each message goes to the template whole, as JSON (tool calls, tool results, `name`, content
        parts, reasoning content); a value that is not JSON is refused naming its field. The prompt
        ids equal the tokenizer's own `apply_chat_template`, and `.prompt` is the rendered text.
        `chat_template_content_format` ("auto" | "string" | "openai", inputs/content_format.py) reshapes
        each `content` as vLLM does; None (the default) passes it as given, as the server does.
        `tokenization_kwargs` as vLLM's (special tokens not added unless asked, inputs/tokenization_kwargs.py).
        """
        params = params_or_sampling_params(params, sampling_params)
        check_lora_request(lora_request)
        if mm_processor_kwargs:
            raise ValueError(
                "mm_processor_kwargs: not supported; images are processed with the model's defaults"
            )
        options = ChatTemplateOptions(
            chat_template, add_generation_prompt, continue_final_message, chat_template_kwargs
        )
        tokenizing = tokenization_options(
            tokenization_kwargs, chat=True, max_model_len=self.engine.max_model_len
        )
        single = is_conversation(messages)
        conversations = [messages] if single else messages
        if not isinstance(conversations, (list, tuple)) or not conversations:
            raise ValueError("messages: must be a conversation (a list of messages) or a list of them")
        listed = tools_json(options.tools(tools))
        content_format = template_content_format(
            self.tokenizer, chat_template_content_format, chat_template, listed
        )
        token_prompts, texts, images = chat_prompts(  # inputs/chat_render.py
            self, conversations, single, listed, options.template_kwargs(), content_format, tokenizing
        )
        return self._generate_ids(token_prompts, params, texts, use_tqdm, images)

    def score(
        self, token_ids_list: Sequence[Sequence[int]], top_logprobs: int | None = None, use_tqdm: bool = False
    ) -> list[ScoreOutput]:
        """Teacher-forced logprobs of each given sequence (prompt + completion a trainer did not sample
        here), in order: `ScoreOutput.logprobs[i]` is the logprob of token i + 1 given the tokens before
        it, as a transformers forward computes it (rollout/scoring.py). Batched with everything else;
        a sequence must fit the context with one token to spare (max_model_len - 1 tokens)."""
        sequences = check_sequences(token_ids_list)
        outputs = self._generate_ids(sequences, score_params(top_logprobs), [None] * len(sequences), use_tqdm)
        return [score_output(output, top_logprobs) for output in outputs]

    def _generate_ids(
        self,
        token_prompts: list[list[int]],
        params: Params,
        texts: list[str | None],
        use_tqdm: bool,
        images: Sequence[MultiModalInputs | None] | None = None,
    ) -> list[RequestOutput]:
        per_prompt = _params_per_prompt(params, len(token_prompts))
        images = images if images is not None else [None] * len(token_prompts)
        with self._lock:
            self._writes.check(self.engine)
            for ids, p, mm in zip(token_prompts, per_prompt, images, strict=True):  # all before queueing any
                self.engine.validate_request(ids, p, multi_modal=mm)
            request_ids = [f"llm-{next(self._ids)}" for _ in token_prompts]
            for i, (request_id, ids) in enumerate(zip(request_ids, token_prompts, strict=True)):
                self.engine.add_request(request_id, ids, per_prompt[i], texts[i], multi_modal=images[i])
            return with_decoded_tokens(self._run(request_ids, use_tqdm), per_prompt, self.tokenizer)

    def _run(self, request_ids: list[str], use_tqdm: bool) -> list[RequestOutput]:
        results: dict[str, RequestOutput] = {}
        pending = set(request_ids)
        bar_type = use_tqdm if callable(use_tqdm) else tqdm  # vLLM's use_tqdm: a bool or a tqdm factory
        with bar_type(total=len(request_ids), disable=not use_tqdm, desc="generate", unit="prompt") as bar:
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

    def resume_aborted(
        self, outputs: list[RequestOutput], params: SamplingParams, use_tqdm: bool = False
    ) -> list[RequestOutput]:
        """`outputs` with every aborted sample continued to completion under the current weights.

        `params` are the ones the samples were started with (`max_tokens` counts the tokens they
        already have); the other samples are returned as they are.
        """
        todo = aborted_samples(outputs)
        single = single_sample(params)
        with self._lock:
            self._writes.check(self.engine)
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
        named_tensors: Iterable[tuple[str, torch.Tensor]] | Mapping[str, torch.Tensor] | torch.nn.Module,
        version: int | None = None,
        in_flight: str = "wait",
        lora: LoraTargets | str | None = None,
        base_version: int | None = None,
    ) -> int:
        """Atomic in-place update; `in_flight` ("wait" | "abort" | "keep" | "recompute") applies to
        requests left in `self.engine` (see rollout/engine/versions/in_flight.py).

        A PEFT model sends its adapter only (`lora="adapter"`, the default for one) or its base
        weights and adapter (`lora="full"`); named tensors with LoRA factors take `lora={module:
        LoraTarget}` (rollout/weights/lora.py). An adapter merges into the base named by
        `base_version` (default: the base this LLM's last update left, or the weights it loaded); if
        the engine holds another (its weights written directly, `llm.engine.update_weights`),
        BaseMismatchError and nothing changes (rollout/weights/weight_base.py)."""
        named_tensors, lora = update_source(named_tensors, lora)
        with self._lock:
            base = self._base_version if base_version is None else base_version
            try:
                version = self.engine.update_weights(named_tensors, version, in_flight, lora, base)
            finally:  # whatever was written (or rolled back) belongs to the version the engine holds
                self._writes.seen(self.engine.weight_version)
            self._base_version = self.engine.adapters.base_version
            return version

    @property
    def base_version(self) -> int:
        """The version that set the base adapters merge into (0: the weights loaded)."""
        return self.engine.adapters.base_version

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    def sleep(self, level: int = 1) -> int:
        """vLLM's sleep mode: level 1 frees the KV cache and offloads the weights (kept in place on a
        CPU), level 2 discards them too (restored by the next `update_weights`). Returns when the memory
        is given back (returns its bytes); generating raises SleepModeError until `wake_up()`."""
        with self._lock:
            return self.memory.sleep(level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Takes the memory back: `tags` None (all), ["weights"] or ["kv_cache"]; weights first."""
        with self._lock:
            self.memory.wake_up(tags)

    def is_sleeping(self) -> bool:
        return self.memory.is_sleeping()

    def reset_prefix_cache(self) -> None:
        with self._lock:
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


def _with_engine_kwargs(config: EngineConfig | None, kwargs: dict[str, Any]) -> EngineConfig | None:
    """`config` with EngineConfig fields given as keywords (vLLM's way); TypeError names any other."""
    unknown = sorted(set(kwargs) - _CONFIG_FIELDS)
    if unknown:
        raise TypeError(
            f"LLM() got unexpected keyword argument(s) {', '.join(unknown)}; "
            f"engine keywords are EngineConfig fields: {', '.join(sorted(_CONFIG_FIELDS))}"
        )
    if not kwargs:
        return config
    return dataclasses.replace(config or EngineConfig(), **kwargs)
