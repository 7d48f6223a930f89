"""Every family the engine accepts runs exactly; every family it cannot run is refused, naming the cause.

Supported: greedy tokens equal `generate`, logprobs equal a teacher-forced forward, across chunked
prefill and decode, and the load-time self-check passes (it runs inside the engine's constructor).
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from rollout import LLM, EngineConfig, SamplingParams
from rollout.engine.engine_weights import check_runner
from rollout.engine.model import check_forwards, model_guard
from rollout.engine.model.model_guard import UnsupportedModelError
from rollout.engine.model.self_check import run_self_check
from rollout.ops import paged_attention_ref
from rollout.ops.attention_backend import AttentionBackend
from tests.models.zoo import REFUSED, SUPPORTED, Family, build

PROMPT = [3, 5, 7, 9, 11, 13, 17, 19, 23, 29, 31]
NEW_TOKENS = 6
# Small blocks and a small token budget: the prompt is prefilled in chunks across blocks.
CONFIG = dict(num_blocks=32, block_size=4, max_num_batched_tokens=5, max_model_len=64)


def greedy_generate(model: torch.nn.Module, prompt: list[int], new_tokens: int) -> list[int]:
    """transformers' greedy `generate` for exactly `new_tokens` tokens, EOS an ordinary token (ignore_eos)."""
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False)
    assert out.shape[1] == len(prompt) + new_tokens
    return out[0, len(prompt) :].tolist()


def _ids(families: tuple[Family, ...]) -> list[str]:
    return [f.model_type for f in families]


@pytest.mark.parametrize("family", SUPPORTED, ids=_ids(SUPPORTED))
def test_supported_family_matches_transformers(family: Family) -> None:
    reference = build(family)
    llm = LLM(model=build(family), config=EngineConfig(**CONFIG))
    want = greedy_generate(reference, PROMPT, NEW_TOKENS)
    params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, logprobs=0, ignore_eos=True)
    sample = llm.generate([PROMPT], params)[0].outputs[0]
    assert list(sample.token_ids) == want
    with torch.no_grad():
        logits = reference(torch.tensor([PROMPT + want])).logits[0, len(PROMPT) - 1 : -1].float()
    expected = logits.log_softmax(-1).gather(1, torch.tensor(want)[:, None])[:, 0]
    assert (torch.tensor(sample.token_logprobs) - expected).abs().max().item() <= 1e-4


@pytest.mark.parametrize("family", REFUSED, ids=_ids(REFUSED))
def test_refused_family_names_the_cause(family: Family) -> None:
    with pytest.raises(ValueError) as info:
        LLM(model=build(family), config=EngineConfig(**CONFIG))
    message = str(info.value)
    assert family.note in message
    assert type(build(family)).__name__ in message


@pytest.mark.parametrize("backend", ["torch", "sdpa"])
def test_a_model_adding_its_own_key_rows_is_refused_by_row_count_on_every_backend(backend: str) -> None:
    """deepseek_v4's compressed layers append entries to the keys; the torch backend crashed the load
    with an IndexError and the CPU one blamed a layout precondition."""
    family = next(f for f in REFUSED if f.model_type == "deepseek_v4")
    with pytest.raises(UnsupportedModelError, match=r"key/value rows for \d+ query tokens"):
        LLM(model=build(family), config=EngineConfig(**{**CONFIG, "attention_backend": backend}))


def test_self_check_refuses_a_backend_that_ignores_attention_sinks() -> None:
    """The numeric oracle catches what static checks let through: gpt-oss with its sinks dropped."""
    model = LLM(model=build(_family("gpt_oss")), config=EngineConfig(**CONFIG)).engine.model

    def no_sinks(*args: object, sinks: torch.Tensor | None = None, **kwargs: object) -> torch.Tensor:
        return paged_attention_ref.paged_attention(*args, **kwargs)

    backend = AttentionBackend(paged_attention_ref.write_kv_cache, no_sinks)
    spec = model_guard.check_model(model)
    exact = AttentionBackend(paged_attention_ref.write_kv_cache, paged_attention_ref.paged_attention)
    assert run_self_check(model, spec, exact, block_size=4) <= 1e-3
    with pytest.raises(UnsupportedModelError, match=r"model_type 'gpt_oss'.*differ .* by \d"):
        run_self_check(model, spec, backend, block_size=4)


def test_self_check_runs_by_default_and_a_flag_turns_it_off() -> None:
    """Counted forwards at load: the guard's probe alone when off, probe plus self-check when on."""
    counts = {}
    for enabled in (True, False):
        model = build(_family("llama"))
        calls: list[int] = []
        model.register_forward_pre_hook(lambda *_, calls=calls: calls.append(1))
        LLM(model=model, config=EngineConfig(**CONFIG, self_check=enabled))
        counts[enabled] = len(calls)
    assert counts[False] == 1
    assert counts[True] > 1


def _family(model_type: str) -> Family:
    return next(f for f in SUPPORTED if f.model_type == model_type)


@pytest.mark.parametrize("model_type", ["deepseek_v3", "minicpm3"])
def test_mla_runs_with_value_padded_to_key_width(model_type: str) -> None:
    """Backends that read K and V with one head size (Triton) get V zero-padded; the result is unchanged."""
    model = LLM(model=build(_family(model_type)), config=EngineConfig(**CONFIG)).engine.model
    backend = AttentionBackend(
        paged_attention_ref.write_kv_cache, paged_attention_ref.paged_attention, equal_kv_head_dims=True
    )
    spec = model_guard.check_model(model, backend)
    assert all(layer.v_head_dim == layer.k_head_dim > 12 for layer in spec.layers)
    assert run_self_check(model, spec, backend, block_size=4) <= 1e-3


def test_self_check_reruns_on_a_live_engine_after_a_weight_update() -> None:
    """check_runner re-checks the serving engine; new weights that break exactness are caught."""
    llm = LLM(model=build(_family("gpt_oss")), config=EngineConfig(**CONFIG))
    runner = llm.engine.runner
    with torch.no_grad():
        for name, param in runner.model.named_parameters():
            if name.endswith("sinks"):
                param.copy_(torch.randn_like(param) * 4)
    assert check_runner(runner) <= 1e-3
    runner.backend = AttentionBackend(paged_attention_ref.write_kv_cache, _drop_sinks)
    with pytest.raises(UnsupportedModelError, match="gpt_oss"):
        check_runner(runner)


def _drop_sinks(*args: object, sinks: torch.Tensor | None = None, **kwargs: object) -> torch.Tensor:
    return paged_attention_ref.paged_attention(*args, **kwargs)


def test_llama4_chunks_and_positions_are_what_make_it_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both Llama 4 features matter in the zoo config: drop either and the load-time self-check refuses."""
    family = _family("llama4_text")

    def no_chunks(*args: object, chunk_size: int | None = None, **kwargs: object) -> torch.Tensor:
        return paged_attention_ref.paged_attention(*args, **kwargs)

    model = LLM(model=build(family), config=EngineConfig(**CONFIG)).engine.model
    spec = model_guard.check_model(model)
    backend = AttentionBackend(paged_attention_ref.write_kv_cache, no_chunks)
    with pytest.raises(UnsupportedModelError, match=r"llama4_text.*differ"):
        run_self_check(model, spec, backend, block_size=4)
    monkeypatch.setattr(check_forwards, "derives_positions", lambda model: False)
    exact = AttentionBackend(paged_attention_ref.write_kv_cache, paged_attention_ref.paged_attention)
    with pytest.raises(UnsupportedModelError, match=r"llama4_text.*differ"):
        run_self_check(model, spec, exact, block_size=4)


def test_llama4_samples_of_several_prompts_in_one_batch_match_their_own_forward() -> None:
    """Packed prompts of different lengths (positions unlike packed indices), n samples each."""
    family = _family("llama4_text")
    reference = build(family)
    llm = LLM(
        model=build(family), config=EngineConfig(num_blocks=64, block_size=4, max_num_batched_tokens=16)
    )
    prompts = [PROMPT, PROMPT[:4], PROMPT[3:] + PROMPT]
    params = SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=8, logprobs=0, ignore_eos=True)
    for prompt, output in zip(prompts, llm.generate(prompts, params), strict=True):
        for sample in output.outputs:
            ids = torch.tensor([prompt + list(sample.token_ids)])
            with torch.no_grad():
                logits = reference(ids).logits[0, len(prompt) - 1 : -1].float()
            expected = logits.log_softmax(-1).gather(1, torch.tensor(sample.token_ids)[:, None])[:, 0]
            assert (torch.tensor(sample.token_logprobs) - expected).abs().max().item() <= 1e-4


def test_chunked_layers_without_a_chunk_size_are_refused() -> None:
    config = _family("llama4_text").make_config()
    config.attention_chunk_size = None
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    with pytest.raises(UnsupportedModelError, match=r"llama4_text.*attention_chunk_size is None"):
        LLM(model=model, config=EngineConfig(num_blocks=8, block_size=4, max_model_len=8))
