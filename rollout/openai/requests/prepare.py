"""An HTTP request -> the engine loop's Submissions and how to write the reply (on a worker thread).

Tokenizing, rendering the chat template and checking the request all happen here, on the HTTP
front end's worker threads; the engine loop's thread only admits and steps.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rollout.detokenize.tokenizer_lock import TOKENIZER_LOCK
from rollout.engine.sample.bad_words import with_bad_words_tokenized
from rollout.multimodal.image_parts import ImageLimits
from rollout.multimodal.mm_inputs import MultiModalInputs
from rollout.openai.replies.response_objects import ReplyOptions
from rollout.openai.requests.chat_turns import appended_prompt
from rollout.openai.requests.message_schema import openai_conversation
from rollout.openai.requests.prefix_check import prefix_break
from rollout.openai.requests.request_checks import check_text, check_top_logprobs
from rollout.openai.requests.sampling import UnsupportedFieldError, sampling_params
from rollout.openai.requests.schemas import ChatCompletionRequest, CompletionRequest
from rollout.openai.requests.served_names import ServedNames
from rollout.openai.requests.structured_fields import in_request_terms
from rollout.openai.tools.forced_calls import ForcedCalls, forced_calls
from rollout.openai.tools.template_spelling import template_spelling
from rollout.protocol.prompts import text_char_limit, tokenize_chat, tokenize_text
from rollout.sampling_params import SamplingParams
from rollout.sampling_params.logprobs_modes import canonical_mode
from rollout.server.admission import too_many_prompts
from rollout.server.handle import Submission

FORCED_SPEC_FIELD = "structured_outputs.structural_tag:"


@dataclass(frozen=True)
class Prepared:
    """The submissions of one HTTP request (one per prompt) and how its choices are written."""

    submissions: list[Submission]
    opts: ReplyOptions
    n: int
    # Response-level extension fields (prefix_check.py's `prefix_stable`, `prefix_break`).
    extensions: dict[str, Any] = field(default_factory=dict)


class Preparer:
    """Turns request bodies into Submissions for one engine (its tokenizer, context, vocabulary)."""

    def __init__(
        self,
        engine: Any,
        served: ServedNames,
        tool_parser: str,
        max_prompts: int | None = None,
        image_limits: ImageLimits | None = None,
    ):
        self.engine = engine
        # image parts are taken on an image-text-to-text model only (message_checks.py refuses them otherwise)
        self.image_limits = (image_limits or ImageLimits()) if engine.images is not None else None
        self.max_prompts = max_prompts  # the engine loop's max_pending_requests: counted before tokenizing
        self.served = served
        self.tool_parser = tool_parser
        self.tokenizer = engine.tokenizer
        self.call_spelling = template_spelling(self.tokenizer, tool_parser)  # forced calls write it
        self.max_chars = (
            None if self.tokenizer is None else text_char_limit(self.tokenizer, engine.max_model_len)
        )

    def chat(self, req: ChatCompletionRequest, request_id: str, caller: str) -> Prepared:
        self.served.check(req.model)
        _check_chat_options(req, self.engine.vocab_size)
        messages, tools, images = openai_conversation(req.messages, req.tools, self.image_limits)
        extensions: dict[str, Any] = {}
        if req.prompt_token_ids is not None:
            if images:
                raise ValueError("prompt_token_ids: not taken with image parts; send the whole conversation")
            ids = appended_prompt(self.tokenizer, list(req.prompt_token_ids), messages, tools, self.max_chars)
        else:
            ids, text = tokenize_chat(self.tokenizer, messages, self.max_chars, tools)
            extensions = _prefix_fields(self.tokenizer, messages, text, ids, tools) if not images else {}
        mm = self.engine.images.build(ids, images, "messages") if images else None  # placeholders expanded
        forced = forced_calls(
            req.tool_choice, tools, req.parallel_tool_calls, self.tool_parser, self.call_spelling
        )
        parser = "none" if req.tool_choice == "none" else forced.parser if forced else self.tool_parser
        opts = self._options(req, bool(req.logprobs), req.top_logprobs or 0, parser, forced)
        sub = self._submission(req, mm.prompt_token_ids if mm else ids, None, request_id, caller, forced, mm)
        return Prepared([sub], opts, req.n, extensions)

    def completion(self, req: CompletionRequest, request_id: str, caller: str) -> Prepared:
        self.served.check(req.model)
        _check_completion_options(req)
        subs = [
            self._submission(req, ids, text, f"{request_id}-{i}", caller)
            for i, (ids, text) in enumerate(self._prompts(req.prompt))
        ]
        opts = self._options(req, req.logprobs is not None, req.logprobs or 0, "none")
        return Prepared(subs, opts, req.n)

    def _submission(
        self,
        req: ChatCompletionRequest | CompletionRequest,
        ids: list[int],
        text: str | None,
        request_id: str,
        caller: str,
        forced: ForcedCalls | None = None,
        multi_modal: MultiModalInputs | None = None,
    ) -> Submission:
        params = sampling_params(req, len(ids), self.engine.max_model_len)
        if forced is not None:
            params = _with_forced_calls(params, forced)
        if params.bad_words:
            with TOKENIZER_LOCK:
                params = with_bad_words_tokenized(params, self.tokenizer)
        try:
            self.engine.validate_request(ids, params, multi_modal=multi_modal)  # compiles a grammar, bounded
        except ValueError as exc:
            message = in_request_terms(str(exc), req)
            if forced is not None:  # the grammar is the tools' parameters, as tool_choice forces them
                message = message.replace(
                    FORCED_SPEC_FIELD, "tools: the forced calls' grammar (tool_choice)", 1
                )
            raise ValueError(message) from None
        stream = bool(req.stream)
        return Submission(
            request_id, ids, params, text, caller=caller, stream=stream, multi_modal=multi_modal
        )

    def _prompts(
        self, prompt: str | list[str] | list[int] | list[list[int]]
    ) -> list[tuple[list[int], str | None]]:
        if isinstance(prompt, str):
            prompt = [prompt]
        if not prompt:
            raise ValueError("prompt: empty; give text, token ids, or a list of either")
        if all(isinstance(p, int) for p in prompt):
            return [(list(prompt), None)]
        if self.max_prompts is not None and len(prompt) > self.max_prompts:
            raise ValueError(too_many_prompts(len(prompt), self.max_prompts, "prompt"))
        prompts = []
        for i, p in enumerate(prompt):
            if isinstance(p, str):
                prompts.append((tokenize_text(self.tokenizer, p, self.max_chars, f"prompt[{i}]"), p))
            else:
                prompts.append((list(p), None))
        return prompts

    def _options(
        self, req: Any, logprobs: bool, top: int, parser: str, forced: ForcedCalls | None = None
    ) -> ReplyOptions:
        named = forced is not None and forced.named
        token_ids = req.return_token_ids is not False
        mode = (
            self.engine.config.logprobs_mode
            if req.logprobs_mode is None
            else canonical_mode(req.logprobs_mode)
        )
        return ReplyOptions(
            self.tokenizer, parser, logprobs, top, token_ids, req.skip_special_tokens, named, mode
        )


def _prefix_fields(
    tokenizer: Any, messages: list[dict[str, Any]], text: str, ids: list[int], tools: list | None
) -> dict[str, Any]:
    """`prefix_stable` (and `prefix_break` when false) for a request that re-sends assistant turns as
    text; nothing for a first turn."""
    if not any(m.get("role") == "assistant" for m in messages):
        return {}
    found = prefix_break(tokenizer, messages, text, ids, tools)
    return (
        {"prefix_stable": True}
        if found is None
        else {"prefix_stable": False, "prefix_break": found.as_json()}
    )


def _check_chat_options(req: ChatCompletionRequest, vocab_size: int) -> None:
    check_text(req)
    check_top_logprobs(req, vocab_size)


def _with_forced_calls(params: SamplingParams, forced: ForcedCalls) -> SamplingParams:
    """`params` constrained to the forced calls' grammar; a request that constrains its output another
    way too is refused (two grammars cannot both hold)."""
    if params.structured_outputs is not None:
        raise ValueError(
            "tool_choice: a forced tool call constrains the output already; it cannot be combined with "
            "response_format, structured_outputs or guided_*"
        )
    return dataclasses.replace(params, structured_outputs=forced.spec)


def _check_completion_options(req: CompletionRequest) -> None:
    check_text(req)
    if req.echo:
        raise UnsupportedFieldError(
            "echo: not supported by this server; prompt_token_ids are in the response"
        )
    if req.suffix is not None:
        raise UnsupportedFieldError("suffix: not supported by this server")
    if req.best_of is not None and req.best_of != req.n:
        raise UnsupportedFieldError("best_of: only best_of == n is supported")
