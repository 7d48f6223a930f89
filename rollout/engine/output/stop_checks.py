"""Whether a sample's newest token finishes it, and why: EOS, a stop token, the grammar's end, the length
limit (vLLM's order and `stop_reason`s), or a stop string its text completed.

Stop strings are matched on the text. Offline, the engine does it as it samples, on each sample's text kept
from token to token; in the server, the tokenizer never runs on the loop's thread: each new token of such
samples goes to the server's detokenizer thread (server/stop_watch.py), which reports a hit back
(LLMEngine.finish_on_stop_string) while the sample runs on.
"""

from __future__ import annotations

from typing import Any

from rollout.detokenize.sample_text import SampleText
from rollout.detokenize.tokenizer_lock import TOKENIZER_LOCK
from rollout.engine.output.token_record import truncate_outputs
from rollout.engine.requests.request import Request, Sequence


def finish_reason(seq: Sequence, eos_token_ids: frozenset[int], max_model_len: int) -> str | None:
    """ "stop" or "length" when the last token ends the sample (setting `seq.stop_reason`), else None."""
    params = seq.request.params
    token = seq.token_ids[-1]
    if token in eos_token_ids and not params.ignore_eos:
        return "stop"  # stop_reason stays None, as vLLM's for EOS
    if token in params.stop_token_ids:
        seq.stop_reason = token
        return "stop"
    if seq.grammar is not None and seq.grammar.finished:
        return "stop"  # the grammar took its stop token (with ignore_eos): nothing may follow
    if seq.num_output_tokens >= params.max_tokens or seq.num_tokens >= max_model_len:
        return "length"
    return None


class StopStrings:
    """Checks a sample's stop strings as it samples (offline), or collects its tokens for a thread that does."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        # With the engine's detokenize off: (request id, sample index, token id) of each new token of
        # samples with stop strings, for whoever checks them (the server's detokenizer thread).
        self.collect_tokens = False
        self._tokens: list[tuple[str, int, int]] = []

    def check(self, seq: Sequence, reason: str | None, detokenize: bool) -> str | None:
        """ "stop" when the text just completed a stop string (it outranks "length", as in vLLM), else `reason`;
        without `detokenize`, the token is collected instead and the sample runs on meanwhile."""
        if not detokenize:
            if self.collect_tokens:
                self._tokens.append((seq.request.request_id, seq.sample_index, seq.token_ids[-1]))
            return reason
        if seq.text is None:
            seq.text = SampleText(self.tokenizer, seq.request.prompt_token_ids, seq.request.params)
        with TOKENIZER_LOCK:
            hit = seq.text.feed(seq.token_ids, seq.num_prompt_tokens)
        if hit is None:
            return reason
        seq.stop_reason = hit
        return "stop"

    def take_tokens(self) -> list[tuple[str, int, int]]:
        """The tokens collected since the last call."""
        tokens, self._tokens = self._tokens, []
        return tokens


def cut_at_stop_string(
    request: Request | None, sample_index: int, num_output_tokens: int, stop_string: str
) -> Sequence | None:
    """The running sample whose text completed `stop_string` at output token `num_output_tokens - 1`, cut
    back to that token (later tokens dropped with everything recorded for them); None if it finished."""
    seqs = request.sequences if request is not None else []
    seq = next((s for s in seqs if s.sample_index == sample_index and not s.is_finished), None)
    if seq is None or seq.num_output_tokens < num_output_tokens:
        return None
    truncate_outputs(seq, num_output_tokens)
    seq.stop_reason = stop_string
    return seq
