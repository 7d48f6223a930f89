"""The load-time self-check with an image: an image-text-to-text model's engine forward, on a prompt with
one synthetic image, against the model's own forward on the same ids and pixels (transformers' eager
attention, its own embedding scatter and positions).

The engine's steps cut through the image (a chunk ends inside it), then decode a few text tokens one at a
time, so the feature rows of a chunk, M-RoPE's 3-D positions and the decode delta are all on trial; the
text self-check (self_check.py) has already passed. A gap beyond the engine's promise refuses the model.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from rollout.engine.kv.kv_cache import KVCacheSpec, allocate_kv_caches
from rollout.engine.model.check_forwards import position_gaps
from rollout.engine.model.model_guard import UnsupportedModelError
from rollout.engine.model.self_check import TOLERANCE, deterministic_threads, model_name
from rollout.engine.requests.request import Request, Sequence
from rollout.engine.vision.image_embeddings import ImageEmbeddings
from rollout.engine.vision.vision_model import check_image_model
from rollout.hf import attention as hf_attention
from rollout.hf.attention_scope import set_engine_attention
from rollout.multimodal.families import image_token_id
from rollout.multimodal.mm_inputs import MultiModalInputs
from rollout.ops.attention_backend import AttentionBackend
from rollout.ops.attention_metadata import AttentionMetadata
from rollout.sampling_params import SamplingParams

_TEXT = [3, 4, 5]  # around the image, and the decoded tokens: plain ids of any vocabulary
_DECODE = 3


@torch.inference_mode()
def check_with_image(
    model: PreTrainedModel,
    images: ImageEmbeddings,
    spec: KVCacheSpec,
    backend: AttentionBackend,
    block_size: int,
) -> float:
    """The largest gap (self_check.TOLERANCE's measure); UnsupportedModelError beyond the tolerance."""
    family = check_image_model(model)
    encoder_inputs = family.probe(model.config, torch.Generator().manual_seed(0))
    count = family.tokens_per_image(model.config, encoder_inputs)[0]
    token = image_token_id(model.config)
    prompt = _TEXT + [token] * count + _TEXT
    full = prompt + _TEXT[:_DECODE]
    seq = _probe_sequence(prompt, encoder_inputs, count)
    with deterministic_threads():
        want = _own_logits(model, full, encoder_inputs, token, family.mrope)
        try:  # whatever breaks, the model is refused with the cause, never crashes the load
            got = _engine_logits(model, images, seq, full, spec, backend, block_size)
        except Exception as exc:
            raise UnsupportedModelError(
                f"{model_name(model)} fails in the engine's forward with an image ({type(exc).__name__}: {exc})"
            ) from exc
    gap = position_gaps(model.dtype, [got[len(_TEXT) :]], [want[len(_TEXT) :]])[0].max().item()
    tolerance = TOLERANCE.get(model.dtype, TOLERANCE[torch.bfloat16])
    if not gap <= tolerance:
        raise UnsupportedModelError(
            f"{model_name(model)}: with an image, the engine's forward differs from the model's own by {gap:.3g} "
            f"(at most {tolerance:g}); the engine cannot run this model exactly with images"
        )
    return gap


def _probe_sequence(prompt: list[int], encoder_inputs: dict, count: int) -> Sequence:
    start = len(_TEXT)
    mm = MultiModalInputs(
        prompt_token_ids=prompt,
        encoder_inputs=encoder_inputs,
        image_hashes=("self-check",),
        image_spans=((start, start + count),),
        feature_positions=torch.arange(start, start + count),
    )
    request = Request("self-check", list(prompt), SamplingParams(), 0, 0, multi_modal=mm)
    return Sequence(0, request, list(prompt), len(prompt))


def _own_logits(
    model: PreTrainedModel, ids: list[int], inputs: dict, token: int, mrope: bool
) -> torch.Tensor:
    device = next(model.parameters()).device
    tensors = {k: v.to(device, model.dtype if v.is_floating_point() else v.dtype) for k, v in inputs.items()}
    input_ids = torch.tensor([ids], device=device)
    if mrope:
        tensors["mm_token_type_ids"] = (input_ids == token).int()
    model.set_attn_implementation("eager")
    try:
        return model(input_ids=input_ids, use_cache=False, **tensors).logits[0].float()
    finally:
        set_engine_attention(model)


def _engine_logits(
    model: PreTrainedModel,
    images: ImageEmbeddings,
    seq: Sequence,
    ids: list[int],
    spec: KVCacheSpec,
    backend: AttentionBackend,
    block_size: int,
) -> torch.Tensor:
    """Chunks [0, cut), [cut, prompt end), then one token per step; each step's logits, all rows."""
    device = next(model.parameters()).device
    num_blocks = -(-len(ids) // block_size)
    kv_caches = allocate_kv_caches(spec, num_blocks, block_size, device)
    prompt_len = seq.num_prompt_tokens
    cut = len(_TEXT) + 1  # inside the image
    bounds = [0, cut, prompt_len, *range(prompt_len + 1, len(ids) + 1)]
    seq.token_ids = list(ids)
    out = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        seq.num_computed_tokens = start
        items = [(seq, end - start)]
        input_ids = torch.tensor([ids[start:end]], device=device)
        positions = torch.arange(start, end, device=device)[None]
        embeds, positions = images.inputs(items, input_ids, positions, version=0)
        meta = _metadata(start, end, num_blocks, block_size, device)
        tokens = {"inputs_embeds": embeds} if embeds is not None else {"input_ids": input_ids}
        context = hf_attention.ForwardContext(kv_caches, meta, backend)
        with hf_attention.forward_context(context):
            out.append(model(**tokens, position_ids=positions, use_cache=False).logits[0].float())
    images.num_encoder_runs = 0  # the probe's run is not a request's
    return torch.cat(out)


def _metadata(
    start: int, end: int, num_blocks: int, block_size: int, device: torch.device
) -> AttentionMetadata:
    slots = list(range(start, end))  # blocks 0.. in order: slot = position
    return AttentionMetadata(
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        cu_seqlens_q=torch.tensor([0, end - start], dtype=torch.int32, device=device),
        seq_lens=torch.tensor([end], dtype=torch.int32, device=device),
        block_tables=torch.tensor([list(range(num_blocks))], dtype=torch.int32, device=device),
        max_query_len=end - start,
        max_seq_len=end,
        query_lens_cpu=[end - start],
        seq_lens_cpu=[end],
    )
