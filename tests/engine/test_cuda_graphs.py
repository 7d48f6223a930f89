"""Graphed decode: buckets, the switch, and the padded static-buffer forward against the eager path.

On CPU the padded forward runs uncaptured (`enable_decode_graphs(capture=False)`), which checks
everything a CUDA graph replays except the capture itself; the `gpu` tests capture real graphs.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from rollout import LLM, EngineConfig, SamplingParams
from rollout.engine.cuda_graphs import (
    MAX_GRAPH_BATCH,
    DecodeGraphs,
    capture_refusal,
    decode_buckets,
    use_cuda_graphs,
)
from rollout.engine.requests.request import Request, Sequence
from rollout.engine.scheduler import ScheduledSequence, SchedulerOutput
from rollout.ops.backends import get_backend
from rollout.outputs import CompletionOutput
from tests.builders import ARCHITECTURES, random_prompts, tiny_llm, tiny_model
from tests.engine.op_recorder import OpRecorder


def _triton_runs() -> bool:
    """Compiled on CUDA, or in the interpreter (TRITON_INTERPRET=1 set before triton's first import)."""
    if importlib.util.find_spec("triton") is None:
        return False
    import triton

    return torch.cuda.is_available() or type(triton.language.standard.max).__name__ == "InterpretedFunction"


needs_triton = pytest.mark.skipif(not _triton_runs(), reason="Triton is missing, or its interpreter is off")
# Triton kernels need CUDA tensors when CUDA is there; eager, since padded_llm enables the padded path.
TRITON_DEVICE = dict(device="cuda", enforce_eager=True) if torch.cuda.is_available() else {}

# 5 prompts x 3 samples = 15 sequences in one batch, finishing at different lengths: decode batches
# of 15, 12, 9, 6, 3 rows land in buckets 16, 16, 16, 8, 4, so every decode step carries padding.
PROMPTS = random_prompts(5, 3, 40, seed=1)
MAX_TOKENS = [4, 7, 9, 12, 5]


def padded_llm(**config: object) -> LLM:
    """An engine whose pure-decode steps run the graph path's padded forward, without capture."""
    llm = tiny_llm(**config)
    engine = llm.engine
    assert engine.runner.enable_decode_graphs(engine.config.max_num_seqs, engine.max_model_len, capture=False)
    return llm


def graphs_of(llm: LLM) -> DecodeGraphs:
    graphs = llm.engine.runner.decode_graphs
    assert graphs is not None
    return graphs


def generate(llm: LLM, **params: object) -> list[list[CompletionOutput]]:
    """PROMPTS in one batch, each with its own max_tokens; samples per prompt, in index order."""
    engine = llm.engine
    for i, (prompt, max_tokens) in enumerate(zip(PROMPTS, MAX_TOKENS, strict=True)):
        logprobs = 2 if i % 2 else 0
        sampling = SamplingParams(n=3, max_tokens=max_tokens, logprobs=logprobs, ignore_eos=True, **params)
        engine.add_request(f"r{i}", prompt, sampling)
    samples: dict[str, list[CompletionOutput]] = {f"r{i}": [] for i in range(len(PROMPTS))}
    while engine.has_unfinished_requests():
        for out in engine.step():
            samples[out.request_id].extend(out.outputs)
    return [sorted(outs, key=lambda c: c.index) for outs in samples.values()]


def assert_same_outputs(
    got: list[list[CompletionOutput]], expected: list[list[CompletionOutput]], atol: float = 1e-5
) -> None:
    for samples, ref_samples in zip(got, expected, strict=True):
        for sample, ref in zip(samples, ref_samples, strict=True):
            assert sample.token_ids == ref.token_ids
            # Logprob is a float subclass; torch.testing looks number types up exactly, so compare as tensors
            torch.testing.assert_close(
                torch.tensor(sample.token_logprobs), torch.tensor(ref.token_logprobs), atol=atol, rtol=0
            )
            for top, ref_top in zip(sample.top_logprobs or [], ref.top_logprobs or [], strict=True):
                assert top.keys() == ref_top.keys()
                torch.testing.assert_close(
                    torch.tensor(list(top.values())), torch.tensor(list(ref_top.values())), atol=atol, rtol=0
                )


def record_batches(graphs: DecodeGraphs, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(real rows, bucket) of every padded step."""
    batches: list[tuple[int, int]] = []
    load = graphs.buffers.load

    def recording_load(sched: SchedulerOutput, batch: int) -> None:
        batches.append((len(sched.scheduled), batch))
        load(sched, batch)

    monkeypatch.setattr(graphs.buffers, "load", recording_load)
    return batches


def stacked_cache(llm: LLM) -> torch.Tensor:  # [layers, 2, num_blocks + 1, block_size, Hkv, D]
    return torch.stack([torch.stack(kv) for kv in llm.engine.runner.kv_caches])


def scheduled(num_tokens: int, num_computed: int, num_new: int) -> ScheduledSequence:
    request = Request("r", list(range(num_tokens)), SamplingParams(), arrival=0, weight_version=0)
    seq = Sequence(0, request, list(range(num_tokens)), num_tokens, num_computed_tokens=num_computed)
    return ScheduledSequence(seq, num_new)


# ---- buckets and the switch -------------------------------------------------------------------


def test_buckets_are_1_2_4_then_multiples_of_8_up_to_max_num_seqs() -> None:
    assert decode_buckets(40) == [1, 2, 4, 8, 16, 24, 32, 40]
    assert decode_buckets(20) == [1, 2, 4, 8, 16, 20]
    assert decode_buckets(3) == [1, 2, 3]
    assert decode_buckets(1) == [1]
    assert decode_buckets(10 * MAX_GRAPH_BATCH)[-1] == MAX_GRAPH_BATCH


def test_a_batch_runs_in_the_smallest_bucket_that_holds_it() -> None:
    graphs = graphs_of(padded_llm(max_num_seqs=20))
    expected = {1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 8: 8, 9: 16, 16: 16, 17: 20, 20: 20}
    assert {n: graphs.bucket_for(n) for n in expected} == expected
    assert graphs.bucket_for(21) is None


def test_graphs_are_used_only_on_cuda_without_enforce_eager_with_a_capturable_backend() -> None:
    pytest.importorskip("triton")
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    triton_backend, torch_backend = get_backend("triton", cuda), get_backend("torch", cuda)
    model = tiny_model()
    assert use_cuda_graphs(EngineConfig(), cuda, triton_backend, model)
    assert not use_cuda_graphs(EngineConfig(enforce_eager=True), cuda, triton_backend, model)
    assert not use_cuda_graphs(EngineConfig(), cuda, torch_backend, model)
    assert not use_cuda_graphs(EngineConfig(), cpu, get_backend("triton", cpu), model)
    assert tiny_llm().engine.runner.decode_graphs is None  # CPU engines stay eager


def test_stacked_experts_in_other_dtypes_than_bf16_are_not_captured_saying_why() -> None:
    """torch's CUDA grouped_mm for fp32/fp16 copies the group offsets to the host: the capture of an
    fp32 Mixtral failed on an H200. The engine declines up front, naming the module; bf16 captures."""
    pytest.importorskip("triton")
    cuda, backend = torch.device("cuda"), get_backend("triton", torch.device("cuda"))
    moe = tiny_model("qwen3_moe")
    why = capture_refusal(moe)
    assert why is not None and "experts" in why and "float32" in why
    assert not use_cuda_graphs(EngineConfig(), cuda, backend, moe)
    assert capture_refusal(moe.to(torch.float16)) is not None
    assert capture_refusal(moe.to(torch.bfloat16)) is None
    assert use_cuda_graphs(EngineConfig(), cuda, backend, moe)
    assert capture_refusal(tiny_model()) is None  # no stacked experts


def test_only_pure_decode_steps_that_fit_take_the_padded_path() -> None:
    graphs = graphs_of(padded_llm(max_num_seqs=4))
    decode = scheduled(10, 9, 1)
    assert graphs.can_run(SchedulerOutput([decode, scheduled(5, 4, 1)]))
    assert not graphs.can_run(SchedulerOutput([decode, scheduled(10, 0, 10)]))  # a prefill chunk
    assert not graphs.can_run(SchedulerOutput([decode, scheduled(10, 3, 1)]))  # 1-token chunk, no sample
    assert not graphs.can_run(SchedulerOutput([scheduled(10, 9, 1) for _ in range(5)]))  # > largest bucket


# ---- the padded forward against the eager one ---------------------------------------------------


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_padded_decode_gives_the_eager_greedy_tokens_and_logprobs(
    arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    padded = padded_llm(arch=arch, max_num_seqs=24)
    batches = record_batches(graphs_of(padded), monkeypatch)
    got = generate(padded, temperature=0)
    assert_same_outputs(got, generate(tiny_llm(arch=arch, max_num_seqs=24), temperature=0))
    assert any(rows < bucket for rows, bucket in batches), "no step had padding rows"
    assert {bucket for _, bucket in batches} >= {4, 8, 16}


def test_padded_decode_gives_the_eager_seeded_samples() -> None:
    params = dict(temperature=0.8, top_k=40, top_p=0.9, seed=5)
    got = generate(padded_llm(seed=2, max_num_seqs=24), **params)
    assert_same_outputs(got, generate(tiny_llm(seed=2, max_num_seqs=24), **params))


def test_padding_rows_write_only_the_scratch_block() -> None:
    # gpt2's position embeddings make the padding row's K/V nonzero (a zero pad embedding gives zeros)
    padded, eager = padded_llm(arch="gpt2", max_num_seqs=24), tiny_llm(arch="gpt2", max_num_seqs=24)
    generate(padded, temperature=0)
    generate(eager, temperature=0)
    got, expected = stacked_cache(padded), stacked_cache(eager)
    torch.testing.assert_close(got[:, :, :-1], expected[:, :, :-1], atol=1e-5, rtol=0)
    assert got[:, :, -1].abs().sum() > 0  # padding rows did write, to the scratch block
    assert expected[:, :, -1].abs().sum() == 0


def test_update_weights_keeps_storage_and_padded_decode_matches_a_fresh_engine() -> None:
    padded = padded_llm(seed=0, max_num_seqs=24)
    generate(padded, temperature=0)  # the padded path ran before the update
    storage = {name: p.data_ptr() for name, p in padded.engine.model.named_parameters()}
    assert padded.update_weights(tiny_model(seed=1).state_dict()) == 1
    # captured graphs read parameters by address: an update must write in place
    assert {name: p.data_ptr() for name, p in padded.engine.model.named_parameters()} == storage
    steps = graphs_of(padded).num_steps
    got = generate(padded, temperature=0)
    assert graphs_of(padded).num_steps > steps
    assert_same_outputs(got, generate(tiny_llm(seed=1, max_num_seqs=24), temperature=0))


@pytest.mark.triton
@needs_triton
def test_padded_decode_with_triton_kernels_matches_the_eager_reference() -> None:
    """The kernels graphs capture, with the length bound max_model_len and zero-length padding rows."""
    config = dict(max_num_seqs=8, max_model_len=48, block_size=4, **TRITON_DEVICE)
    padded = padded_llm(attention_backend="triton", **config)
    params = SamplingParams(max_tokens=3, temperature=0, logprobs=0, ignore_eos=True)
    prompts = random_prompts(3, 5, 9, seed=4)  # 3 rows in bucket 4
    got = padded.generate(prompts, params)
    assert graphs_of(padded).num_steps == 2
    expected = tiny_llm(attention_backend="torch", **config).generate(prompts, params)
    assert_same_outputs([out.outputs for out in got], [out.outputs for out in expected])


# Ops that make the host wait for the device: a CUDA graph capture fails on them.
SYNCING_OPS = {"_local_scalar_dense", "is_nonzero", "nonzero", "masked_select", "unique", "_unique2", "equal"}


@pytest.mark.triton
@needs_triton
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_forward_a_graph_captures_runs_no_host_syncing_op(arch: str) -> None:
    """A CPU proxy for capturability: the padded forward with the Triton backend, op by op."""
    llm = padded_llm(arch=arch, attention_backend="triton", max_num_seqs=4, max_model_len=32, **TRITON_DEVICE)
    graphs = graphs_of(llm)
    graphs.buffers.pad_all()
    with torch.inference_mode(), OpRecorder() as recorder:
        graphs._forward(4)
    assert "linear" in recorder.ops
    assert not recorder.ops & SYNCING_OPS


# ---- real graphs --------------------------------------------------------------------------------


def cuda_llm(seed: int = 0, **config: object) -> LLM:
    return tiny_llm(seed=seed, device="cuda", attention_backend="triton", max_num_seqs=24, **config)


@pytest.mark.gpu
def test_replayed_graphs_give_the_eager_outputs_on_cuda() -> None:
    graphed = cuda_llm()
    graphs = graphs_of(graphed)
    assert sorted(graphs.graphs) == decode_buckets(24)
    got = generate(graphed, temperature=0)
    assert graphs.num_steps > 0
    assert_same_outputs(got, generate(cuda_llm(enforce_eager=True), temperature=0), atol=1e-4)


@pytest.mark.gpu
def test_replayed_graphs_after_update_weights_match_a_fresh_engine_on_cuda() -> None:
    graphed = cuda_llm(seed=0)
    generate(graphed, temperature=0)
    dtype = graphed.engine.runner.model.dtype  # auto on CUDA: bf16; an fp32 push is refused, by design
    graphed.update_weights({k: v.to(dtype) for k, v in tiny_model(seed=1).state_dict().items()})
    steps = graphs_of(graphed).num_steps
    got = generate(graphed, temperature=0)
    assert graphs_of(graphed).num_steps > steps
    assert_same_outputs(got, generate(cuda_llm(seed=1, enforce_eager=True), temperature=0), atol=1e-4)
