"""DecodeGraphs: pure-decode steps replayed from CUDA graphs, one graph per batch-size bucket.

A decode step of a small model launches hundreds of short kernels, and on a GPU their launch cost
dominates. Each bucket's forward is captured once over the fixed-address `DecodeBuffers`, largest
first into one shared memory pool; a step then copies its inputs in and replays. Weight updates
write parameters in place (same storage), so the graphs stay valid across weight versions.

Without capture the same padded forward runs eagerly: that is how CPU tests check everything but
the capture itself.
"""

from __future__ import annotations

import bisect
import logging

import torch
from transformers import PreTrainedModel

from rollout.config import EngineConfig
from rollout.engine.decode_buffers import DecodeBuffers
from rollout.engine.model.derived_positions import derives_positions, position_inputs
from rollout.engine.scheduler import SchedulerOutput
from rollout.hf.attention import ForwardContext, forward_context
from rollout.ops.attention_backend import AttentionBackend

logger = logging.getLogger(__name__)

# Larger decode batches are long enough on the GPU that launch overhead no longer matters.
MAX_GRAPH_BATCH = 512


def use_cuda_graphs(
    config: EngineConfig, device: torch.device, backend: AttentionBackend, model: PreTrainedModel
) -> bool:
    """The switch: CUDA, not `enforce_eager`, an attention backend that is safe to capture, and a model
    whose decode step needs no host round trip (`capture_refusal`)."""
    if device.type != "cuda" or config.enforce_eager or not backend.supports_cuda_graphs:
        return False
    why = capture_refusal(model)
    if why is not None:
        logger.info("decode steps run eagerly, without CUDA graphs: %s", why)
    return why is None


def capture_refusal(model: PreTrainedModel) -> str | None:
    """Why a decode step of `model` cannot be captured, known before trying, or None.

    transformers runs stacked MoE experts through `grouped_mm`; for weights other than bf16, torch's
    CUDA grouped_mm falls back to a loop over the group offsets copied to the host, which a graph
    cannot capture (seen on an H200 with torch 2.11: an fp32 Mixtral's capture failed on that copy)."""
    for name, module in model.named_modules():
        config = getattr(module, "config", None)
        weight = getattr(module, "gate_up_proj", None)
        if weight is None:
            weight = getattr(module, "down_proj", None)
        if (
            getattr(config, "_experts_implementation", None) == "grouped_mm"
            and isinstance(weight, torch.Tensor)
            and weight.dtype != torch.bfloat16
        ):
            return (
                f"{name} runs transformers' grouped_mm experts in {str(weight.dtype).removeprefix('torch.')}, "
                "which torch computes with a host copy of the group offsets (bf16 weights capture)"
            )
    return None


def decode_buckets(max_num_seqs: int) -> list[int]:
    """1, 2, 4, then every multiple of 8, up to and including min(max_num_seqs, MAX_GRAPH_BATCH)."""
    limit = min(max_num_seqs, MAX_GRAPH_BATCH)
    return [b for b in (1, 2, 4) if b < limit] + list(range(8, limit, 8)) + [limit]


class DecodeGraphs:
    def __init__(
        self,
        model: PreTrainedModel,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        backend: AttentionBackend,
        buffers: DecodeBuffers,
        buckets: list[int],
    ) -> None:
        self.model = model
        self.derives_positions = derives_positions(model)
        self.kv_caches = kv_caches
        self.backend = backend
        self.buffers = buffers
        self.buckets = buckets
        device = buffers.input_ids.device
        vocab_size = model.get_output_embeddings().weight.shape[0]
        # One output shared by every bucket, so no graph keeps a logits tensor of its own alive.
        self.logits = torch.empty(buckets[-1], vocab_size, dtype=torch.float32, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.num_steps = 0

    def bucket_for(self, num_seqs: int) -> int | None:
        """The smallest bucket holding `num_seqs` rows; None if none does."""
        i = bisect.bisect_left(self.buckets, num_seqs)
        return self.buckets[i] if i < len(self.buckets) else None

    def can_run(self, sched: SchedulerOutput) -> bool:
        """Pure decode: every sequence computes exactly one token and samples it, and the batch fits."""
        return 0 < len(sched.scheduled) <= self.buckets[-1] and all(
            item.num_new_tokens == 1 and item.samples for item in sched.scheduled
        )

    def run(self, sched: SchedulerOutput) -> torch.Tensor:
        """fp32 logits [num_seqs, vocab]: a view of a static buffer, valid until the next run."""
        num_seqs = len(sched.scheduled)
        batch = self.bucket_for(num_seqs)
        assert batch is not None, "can_run() must be checked first"
        self.buffers.load(sched, batch)
        graph = self.graphs.get(batch)
        if graph is not None:
            graph.replay()
        else:
            self._forward(batch)
        self.num_steps += 1
        return self.logits[:num_seqs]

    def _forward(self, batch: int) -> None:
        """The padded forward: reads only the static buffers, writes only `self.logits` and the cache."""
        context = ForwardContext(self.kv_caches, self.buffers.metadata(batch), self.backend)
        with forward_context(context):
            positions = self.buffers.positions[None, :batch]
            out = self.model(
                input_ids=self.buffers.input_ids[None, :batch],
                position_ids=positions,
                use_cache=False,
                **position_inputs(self.derives_positions, positions),
            )
        self.logits[:batch].copy_(out.logits[0])

    @torch.inference_mode()
    def capture(self) -> bool:
        """Captures every bucket; on failure (a model that syncs with the host) falls back to eager."""
        try:
            self._capture_all()
        except RuntimeError as exc:
            self.graphs.clear()
            logger.warning("CUDA graph capture failed, decode steps run eagerly: %s", exc)
            return False
        return True

    def _capture_all(self) -> None:
        pool = torch.cuda.graph_pool_handle()
        self.buffers.pad_all()  # warm-up and capture then write only the scratch slot
        warmup = torch.cuda.Stream()
        for batch in reversed(self.buckets):  # largest first: smaller graphs reuse its pool memory
            warmup.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(warmup):  # compiles kernels and settles lazy state before capture
                self._forward(batch)
            torch.cuda.current_stream().wait_stream(warmup)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._forward(batch)
            self.graphs[batch] = graph
