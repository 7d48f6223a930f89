"""SamplerReplay: the logprob of each sampled token under the distribution the server drew it from,
computed from a trainer's own logits (differentiable), for importance ratios that are exact under every
sampling setting: penalties, bans, logit_bias, grammars, top-k/top-p/min-p, temperature.

Bound to what the server's sampler knows besides the settings: its EOS ids (what min_tokens bans), its
vocabulary size and tokenizer (bad_words strings, grammars), all of which `for_server` takes from a
`RolloutClient.server_info()` and the trainer's tokenizer (the same tokenizer as the server's).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from rollout.engine.sample.bad_words import with_bad_words_tokenized
from rollout.engine.sample.logits_processors import check_against_vocab
from rollout.replay.processed_distribution import processed_log_softmax
from rollout.replay.replay_rows import sample_rows
from rollout.sampling_params import SamplingParams
from rollout.structured_outputs.request_grammars import RequestGrammars

Sample = tuple[Sequence[int], Sequence[int]]  # (prompt token ids, completion token ids)
PREPARED_KEPT = 256  # settings kept prepared (tokenized bad words, compiled grammar), oldest dropped first


class SamplerReplay:
    def __init__(self, vocab_size: int, eos_token_ids: Iterable[int], tokenizer: Any | None = None) -> None:
        """The server's vocab_size and eos_token_ids (ServerInfo has both), and its tokenizer when the
        settings hold bad_words strings or structured_outputs."""
        self.vocab_size = vocab_size
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self._tokenizer = tokenizer
        self._grammars = RequestGrammars(tokenizer, vocab_size, self.eos_token_ids)
        self._prepared: dict[SamplingParams, tuple[SamplingParams, Any]] = {}  # params -> (prepared, grammar)

    @classmethod
    def for_server(cls, info: Any, tokenizer: Any | None = None) -> SamplerReplay:
        """From `RolloutClient.server_info()` (or `LLM.engine.model_info`)."""
        return cls(info.vocab_size, info.eos_token_ids, tokenizer)

    def prepare(self, params: SamplingParams) -> SamplingParams:
        """`params` as the server's sampler applies them: bad_words tokenized (the server's rule), checked
        against the vocabulary, the grammar compiled (ValueError naming the field, before any logits)."""
        return self._prepare(params)[0]

    def _prepare(self, params: SamplingParams) -> tuple[SamplingParams, Any]:
        if params not in self._prepared:
            if params.bad_words and self._tokenizer is None:
                raise ValueError(
                    "bad_words: the replay needs the tokenizer (SamplerReplay(..., tokenizer=...))"
                )
            prepared = with_bad_words_tokenized(params, self._tokenizer)
            check_against_vocab(prepared, self.vocab_size, self.eos_token_ids)
            self._prepared[params] = (prepared, self._grammars.compile(prepared))
            if len(self._prepared) > PREPARED_KEPT:
                del self._prepared[next(iter(self._prepared))]  # the oldest
        return self._prepared[params]

    def log_softmax(
        self,
        logits: torch.Tensor,
        samples: Sequence[Sample],
        params: SamplingParams | Sequence[SamplingParams],
    ) -> torch.Tensor:
        """[N, vocab] fp32 processed log-probabilities, one row per completion token of `samples` in order
        (N = their total length). logits: [N, vocab], row t of a sample the trainer's logits that predict
        its completion token t (teacher forced on prompt + completion); autograd flows through them."""
        per_sample = [params] * len(samples) if isinstance(params, SamplingParams) else list(params)
        if len(per_sample) != len(samples):
            raise ValueError(f"params: one per sample, got {len(per_sample)} for {len(samples)} samples")
        rows, tokens = [], []
        for (prompt, completion), sample_params in zip(samples, per_sample, strict=True):
            prepared, grammar = self._prepare(sample_params)
            rows += sample_rows(prompt, completion, prepared, grammar, logits.shape[-1])
            tokens += completion
        if logits.dim() != 2 or logits.shape[0] != len(rows):
            raise ValueError(
                f"logits: expected [{len(rows)}, vocab] (one row per completion token), got {list(logits.shape)}"
            )
        token_ids = torch.tensor(tokens, dtype=torch.int64, device=logits.device)
        return processed_log_softmax(logits, rows, token_ids, self.eos_token_ids)

    def logprobs(
        self,
        logits: torch.Tensor,
        prompt_token_ids: Sequence[int],
        completion_token_ids: Sequence[int],
        params: SamplingParams,
    ) -> torch.Tensor:
        """[T] fp32: the processed logprob of each completion token (what the server returns with
        logprobs_mode="processed"), from logits [T, vocab] that predict them; differentiable."""
        samples = [(prompt_token_ids, completion_token_ids)]
        processed = self.log_softmax(logits, samples, params)
        index = torch.tensor(list(completion_token_ids), dtype=torch.int64, device=logits.device)
        return processed.gather(1, index[:, None])[:, 0]
