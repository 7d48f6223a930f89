"""SampleText: one sample's text as its tokens arrive, and the stop string that ends it (vLLM's rules).

A token's text joins the sample's text, then the stop strings are searched in what it added (and the
characters before it that a match could start in). On a match the text is cut before the stop string
(or after it with `include_stop_str_in_output`), and `num_tokens` stays at the token that completed
it: the sample's tokens end there, the whole token kept even when the match ends inside it.
A token that stopped the sample as a stop token (EOS, stop_token_ids) adds no text unless
`include_stop_str_in_output`. Tokens up to `min_tokens` are not searched (vLLM: no stop before it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollout.detokenize.incremental import IncrementalDetokenizer
from rollout.detokenize.stop_strings import check_stop_strings
from rollout.sampling_params import SamplingParams


class SampleText:
    def __init__(
        self,
        tokenizer: Any,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        min_tokens: int | None = None,
    ) -> None:
        """`min_tokens` (default: the params'): output tokens whose text is not searched for stop strings."""
        self.detokenizer = IncrementalDetokenizer(
            tokenizer, list(prompt_ids), params.skip_special_tokens, params.spaces_between_special_tokens
        )
        self.stop = params.stop
        self.include_stop = params.include_stop_str_in_output
        self.min_tokens = params.min_tokens if min_tokens is None else min_tokens
        self.text = ""
        self.num_tokens = 0  # output tokens pushed so far
        self.stop_string: str | None = None  # set once a stop string matched; nothing is pushed after

    def push(self, token_id: int, stop_token: bool = False) -> str | None:
        """Adds the next output token (`stop_token`: it ended the sample as a stop token or EOS);
        returns the stop string it completes, else None."""
        assert self.stop_string is None, "a stopped sample takes no more tokens"
        self.num_tokens += 1
        before = len(self.text)
        if not stop_token or self.include_stop:
            self.text += self.detokenizer.step(token_id)
        if not self.stop or self.num_tokens <= self.min_tokens:
            return None
        hit = check_stop_strings(self.text, len(self.text) - before, self.stop, self.include_stop)
        if hit is not None:
            self.stop_string, cut = hit
            if cut != -1:
                self.text = self.text[:cut]
        return self.stop_string

    def feed(self, token_ids: Sequence[int], start: int = 0, stop_token_last: bool = False) -> str | None:
        """Pushes `token_ids[start + num_tokens:]` (the output tokens not pushed yet) until a stop
        string matches; `stop_token_last`: the last of them is a stop token. Returns the stop string."""
        end = len(token_ids)
        while self.stop_string is None and start + self.num_tokens < end:
            index = start + self.num_tokens
            self.push(token_ids[index], stop_token=stop_token_last and index == end - 1)
        return self.stop_string
