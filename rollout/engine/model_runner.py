"""ModelRunner: runs the unmodified transformers model over a packed batch and the paged KV cache."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from rollout.engine.input_batch import prepare_inputs
from rollout.engine.kv_cache import KVCacheSpec, allocate_kv_caches, copy_blocks
from rollout.engine.scheduler import SchedulerOutput
from rollout.ops.hf_attention import AttentionBackend, ForwardContext


class ModelRunner:
    def __init__(
        self,
        model: PreTrainedModel,
        kv_spec: KVCacheSpec,
        num_blocks: int,
        block_size: int,
        backend: AttentionBackend,
    ) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.block_size = block_size
        self.backend = backend
        self.kv_caches = allocate_kv_caches(kv_spec, num_blocks, block_size, self.device)

    @torch.inference_mode()
    def execute(self, sched: SchedulerOutput) -> torch.Tensor:
        """Computes the scheduled tokens' KV and returns fp32 logits [R, vocab] of the sampling rows."""
        copy_blocks(self.kv_caches, sched.blocks_to_copy)
        inputs = prepare_inputs(sched, self.block_size, self.device)
        context = ForwardContext(self.kv_caches, inputs.meta, self.backend)
        out = self.model(
            input_ids=inputs.input_ids,
            position_ids=inputs.position_ids,
            logits_to_keep=inputs.logits_indices,
            use_cache=False,
            rollout_context=context,
        )
        return out.logits[0].float()
