"""Property test over the text parameters through the engine (stop strings, include_stop_str_in_output,
special tokens, stop tokens, EOS): finite logprobs, valid ids, lengths, vLLM's stop reasons and text,
and no block left allocated. The piece tokenizer decodes by concatenation, which is the oracle here."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout import LLM, EngineConfig, SamplingParams
from tests.builders import VOCAB, tiny_model
from tests.detokenize.tokenizer_builders import PIECES, piece_tokenizer

PROMPTS = [[5, 6, 7, 8, 9, 5, 6], [3, 40, 41, 42]]
SPECIAL = {0, 1, 2}
EOS = 2
stop_string = st.text(alphabet="abcdefghij</> ", min_size=1, max_size=4) | st.sampled_from(
    ["</answer>", "<think>"]
)

text_params = st.builds(
    SamplingParams,
    n=st.integers(1, 3),
    max_tokens=st.integers(1, 12),
    temperature=st.sampled_from([0.0, 0.7, 1.0, 1.5]),
    seed=st.integers(0, 2**32),
    stop=st.lists(stop_string, max_size=3),
    include_stop_str_in_output=st.booleans(),
    skip_special_tokens=st.booleans(),
    spaces_between_special_tokens=st.booleans(),
    stop_token_ids=st.lists(st.integers(0, VOCAB - 1), max_size=2),
    ignore_eos=st.booleans(),
    logprobs=st.sampled_from([None, 0, 2]),
)


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(model=tiny_model("llama", 0), tokenizer=piece_tokenizer(), config=EngineConfig(num_blocks=256))


def concat(tokens: list[int], skip_special: bool) -> str:
    return "".join("" if skip_special and t in SPECIAL else PIECES[t] for t in tokens)


def first_stop(text: str, stop: tuple[str, ...]) -> tuple[str, int] | None:
    """The stop string whose first occurrence completes earliest (ties: list order), and its start."""
    found = [(text.find(s) + len(s), i, s) for i, s in enumerate(stop) if s in text]
    if not found:
        return None
    _, _, s = min(found)
    return s, text.find(s)


def check_sample(sample, params: SamplingParams) -> None:
    tokens = sample.token_ids
    assert 1 <= len(tokens) <= params.max_tokens and all(0 <= t < VOCAB for t in tokens)
    if params.logprobs is None:
        assert sample.token_logprobs is None and sample.cumulative_logprob is None
    else:
        assert len(sample.token_logprobs) == len(tokens) and all(
            math.isfinite(x) and x <= 0 for x in sample.token_logprobs
        )
        assert sample.cumulative_logprob == pytest.approx(sum(sample.token_logprobs), abs=1e-9)
    skip = params.skip_special_tokens
    assert first_stop(concat(tokens[:-1], skip), params.stop) is None  # nothing matched before the last token
    token_stop = (tokens[-1] == EOS and not params.ignore_eos) or tokens[-1] in params.stop_token_ids
    shown = tokens if (params.include_stop_str_in_output or not token_stop) else tokens[:-1]
    full = concat(shown, skip)
    hit = first_stop(full, params.stop)
    if hit is not None:  # a stop string outranks length, and (as in vLLM) a stop token's own stop reason
        stop, start = hit
        assert (sample.finish_reason, sample.stop_reason) == ("stop", stop)
        end = start + len(stop) if params.include_stop_str_in_output else start
        assert sample.text == full[:end]
        return
    assert sample.text == full
    if token_stop:
        eos = tokens[-1] == EOS and not params.ignore_eos
        assert (sample.finish_reason, sample.stop_reason) == ("stop", None if eos else tokens[-1])
    else:
        assert (sample.finish_reason, sample.stop_reason, len(tokens)) == ("length", None, params.max_tokens)


@settings(
    max_examples=80,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI never flakes, failures reproduce
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(params=text_params)
def test_every_text_setting_gives_vllms_stop_reasons_and_text_and_frees_every_block(
    llm: LLM, params: SamplingParams
) -> None:
    outs = llm.generate(PROMPTS, params)
    assert [len(o.outputs) for o in outs] == [params.n] * len(PROMPTS)
    for sample in (s for o in outs for s in o.outputs):
        check_sample(sample, params)
    stats = llm.stats()
    assert stats["num_blocks_free"] == stats["num_blocks_total"]
