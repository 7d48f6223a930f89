"""ModelRunner: runs the unmodified transformers model over a packed batch and the paged KV cache.

Pure-decode steps go through `DecodeGraphs` once `enable_decode_graphs` is called (CUDA graphs on a
GPU); every other step, and every step without it, runs the model eagerly on freshly packed inputs.
`build_runner` makes an engine's: the cache sized to the memory budget, the model self-checked, graphs captured.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from rollout.config import EngineConfig
from rollout.engine.cuda_graphs import DecodeGraphs, decode_buckets, use_cuda_graphs
from rollout.engine.decode_buffers import DecodeBuffers
from rollout.engine.hybrid.recurrent_layers import hybrid_state_pool, segments, step_segments
from rollout.engine.hybrid.state_budget import StateBudget, state_budget
from rollout.engine.hybrid.state_pool import StatePool
from rollout.engine.input_batch import ModelInputs, prepare_inputs
from rollout.engine.kv import kv_sizing
from rollout.engine.kv.kv_cache import KVCacheSpec, allocate_kv_caches, copy_blocks
from rollout.engine.model import model_guard, self_check
from rollout.engine.model.derived_positions import derives_positions, position_inputs
from rollout.engine.model.image_check import check_with_image
from rollout.engine.scheduler import SchedulerOutput
from rollout.engine.vision.image_embeddings import ImageEmbeddings
from rollout.hf.attention import ForwardContext, forward_context
from rollout.ops.attention_backend import AttentionBackend
from rollout.ops.backends import get_backend
from rollout.weights.adapter_store import AdapterPlan
from rollout.weights.updater import apply_named_tensors


class ModelRunner:
    def __init__(
        self,
        model: PreTrainedModel,
        kv_spec: KVCacheSpec,
        num_blocks: int,
        block_size: int,
        backend: AttentionBackend,
        states: StatePool | None = None,
    ) -> None:
        self.model = model
        self.states = states  # a hybrid model's recurrent states, per sequence
        self.device = next(model.parameters()).device
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.backend = backend
        # One block past the allocator's range: the scratch slot that padded decode rows write to.
        self.kv_caches = allocate_kv_caches(kv_spec, num_blocks + 1, block_size, self.device)
        self.scratch_slot = num_blocks * block_size
        self.decode_graphs: DecodeGraphs | None = None
        self.derives_positions = derives_positions(model)
        self.images = ImageEmbeddings.of(model)  # an image-text model's: features at image tokens

    def enable_decode_graphs(self, max_num_seqs: int, max_model_len: int, capture: bool) -> bool:
        """Routes pure-decode steps through padded static buffers; `capture` records CUDA graphs of them.

        Returns False when capture failed: decode steps then stay eager.
        """
        buckets = decode_buckets(max_num_seqs)
        buffers = DecodeBuffers(buckets[-1], max_model_len, self.block_size, self.scratch_slot, self.device)
        graphs = DecodeGraphs(self.model, self.kv_caches, self.backend, buffers, buckets)
        if capture and not graphs.capture():
            return False
        self.decode_graphs = graphs
        return True

    @torch.inference_mode()
    def execute(self, sched: SchedulerOutput) -> torch.Tensor:
        """Computes the scheduled tokens' KV and returns fp32 logits [R, vocab] of the sampling rows."""
        copy_blocks(self.kv_caches, sched.blocks_to_copy)
        items = [(item.seq, item.num_new_tokens) for item in sched.scheduled] if self.images else []
        images = self.images is not None and self.images.needed(items)
        if not images and self.decode_graphs is not None and self.decode_graphs.can_run(sched):
            return self.decode_graphs.run(sched)
        inputs = prepare_inputs(sched, self.block_size, self.device)
        if images:
            ids, positions = inputs.input_ids, inputs.position_ids
            inputs.inputs_embeds, inputs.position_ids = self.images.inputs(
                items, ids, positions, sched.weight_version
            )
        if self.states is None:
            return self.forward(inputs)
        slots = [
            self.states.slot(item.seq.seq_id, item.seq.num_computed_tokens == 0) for item in sched.scheduled
        ]
        with step_segments(segments(inputs.meta.query_lens_cpu, slots)):
            return self.forward(inputs)

    @torch.inference_mode()
    def forward(self, inputs: ModelInputs) -> torch.Tensor:
        """One eager forward over packed inputs; fp32 logits [R, vocab] of their sampling rows."""
        context = ForwardContext(self.kv_caches, inputs.meta, self.backend)
        with forward_context(context):
            out = self.model(
                **inputs.token_inputs(),
                position_ids=inputs.position_ids,
                logits_to_keep=inputs.logits_indices,
                use_cache=False,
                **position_inputs(self.derives_positions, inputs.position_ids),
            )
        return out.logits[0].float()

    def write_weights(self, plan: AdapterPlan) -> None:
        """Validates every tensor of the plan, then writes them all in place (rollout/weights/updater.py)."""
        apply_named_tensors(self.model, plan.tensors)

    def shutdown(self) -> None:
        """Nothing runs beside a single-device runner (the tensor-parallel driver stops its workers)."""


def build_runner(
    model: PreTrainedModel, config: EngineConfig, max_model_len: int
) -> tuple[ModelRunner, StateBudget]:
    """The engine's runner: the model checked (model_guard), a hybrid model's recurrent states given their
    share of the memory budget first, as many KV blocks as the rest holds (kv/kv_sizing.py); the engine's
    forward self-checked against the model's own, decode graphs captured where they can be."""
    backend = get_backend(config.attention_backend, model.device)
    kv_spec = model_guard.check_model(model, backend)
    states = hybrid_state_pool(model, config.max_num_seqs)  # None unless recurrent layers
    budget = state_budget(model, states, config, model.device)  # the states' share first
    num_blocks = kv_sizing.num_blocks(config, max_model_len, kv_spec, budget.kv_bytes)
    runner = ModelRunner(model, kv_spec, num_blocks, config.block_size, backend, states)
    if config.self_check:
        self_check.run_self_check(model, kv_spec, backend, config.block_size, max_model_len)
        if runner.images is not None:  # an image-text model: once more, with an image (model/image_check.py)
            check_with_image(model, runner.images, kv_spec, backend, config.block_size)
    if (
        use_cuda_graphs(config, model.device, backend, model) and states is None
    ):  # hybrids: per-sequence calls
        runner.enable_decode_graphs(config.max_num_seqs, max_model_len, capture=True)
    return runner, budget
