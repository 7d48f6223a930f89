"""CPU paged attention built for speed: per layer, one block gather and one fused SDPA call per group.

The torch reference (paged_attention_ref.py) tiles an online softmax and rebuilds its index tensors
in every layer; here everything that depends only on the batch layout (which rows, which blocks,
the causal / length / sliding-window / chunk masks) is planned once per step, keyed by the metadata
object every layer shares, and each layer then gathers its blocks with one `index_select` per K and
V and runs torch's fused `scaled_dot_product_attention` over them. GQA costs no copy: a KV head's
group of query heads rides in the query-length dimension. Decode rows form one group, prefill
chunks another (padded to their longest), so a mixed step makes two SDPA calls per layer. Decode
rows go to the compiled kernel when it was built (cpu_paged_decode.py: it reads the cache in place,
no gather); without it, decode rows whose sequences share many prompt blocks (a long prompt's n
samples) take the cascade (cascade_attention.py), which reads the shared blocks once per prompt.

Features this path does not implement (softcapping, and any keyword a newer bridge passes with a
value) are delegated to the reference, so they keep working, only slower (the same attention, up to
fp32 rounding).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

import torch
import torch.nn.functional as F

from rollout.ops import paged_attention_ref
from rollout.ops.attention_metadata import AttentionMetadata
from rollout.ops.cascade_attention import MAX_READ_FRACTION, CascadePlan, cascade_attention, plan_cascade
from rollout.ops.cpu_paged_decode import DecodeRows, can_run, decode_attention, plan_decode_rows
from rollout.ops.workspace import Workspace

write_kv_cache = paged_attention_ref.write_kv_cache


def cache_writer(kernels: ModuleType | None) -> Callable[..., None]:
    """The backend's KV write: the compiled copy (csrc/fused_cpu.cpp, one per token and head) for fp32
    CPU caches, where index_copy_ costs a dispatch per tensor and layer; else `write_kv_cache`."""
    if kernels is None:
        return write_kv_cache

    def write(
        key: torch.Tensor,  # [T, num_kv_heads, head_dim]
        value: torch.Tensor,
        key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,  # [T] int64
    ) -> None:
        if (
            key.dtype == value.dtype == key_cache.dtype == value_cache.dtype == torch.float32
            and key.device.type == "cpu"
            and key.stride(-1) == value.stride(-1) == 1
            and key_cache.is_contiguous()
            and value_cache.is_contiguous()
            and slot_mapping.dtype == torch.int64
        ):
            kernels.write_kv(key_cache, value_cache, key, value, slot_mapping.contiguous())
        else:
            write_kv_cache(key, value, key_cache, value_cache, slot_mapping)

    return write


@dataclass(slots=True)
class _Group:
    """Sequences attended together: S of them, queries padded to `max_q`, keys to `num_keys`."""

    rows: torch.Tensor  # [S * max_q] index of each (seq, j) query in the packed batch (padding repeats)
    valid: torch.Tensor | None  # [S * max_q] bool, which of `rows` are real queries; None if all are
    blocks: torch.Tensor  # [S * blocks_per_seq] int64 block ids, row-major per sequence
    q_pos: torch.Tensor  # [S, 1, max_q, 1] position of each query
    seq_lens: torch.Tensor  # [S, 1, 1, 1]
    num_seqs: int
    max_q: int
    num_keys: int
    # by (sliding window, chunk size)
    masks: dict[tuple[int | None, int | None], torch.Tensor] = field(default_factory=dict)

    def mask(self, sliding_window: int | None, chunk_size: int | None) -> torch.Tensor:
        """[S, 1, max_q, num_keys] bool: causal, within the sequence, and within the window / chunk."""
        key = (sliding_window, chunk_size)
        if key not in self.masks:
            k_pos = torch.arange(self.num_keys, device=self.q_pos.device)
            mask = (k_pos <= self.q_pos) & (k_pos < self.seq_lens)
            if sliding_window is not None:
                mask &= k_pos > self.q_pos - sliding_window
            if chunk_size is not None:
                mask &= k_pos // chunk_size == self.q_pos // chunk_size
            self.masks[key] = mask
        return self.masks[key]


class SdpaPagedAttention:
    """The CPU backend's `paged_attention`: remembers the plan of the batch it last saw."""

    # Decode rows share prompt blocks: the cascade when it reads at most this fraction of the blocks.
    cascade_read_fraction = MAX_READ_FRACTION

    def __init__(self, cpu_kernels: ModuleType | None = None) -> None:
        self._kernels = cpu_kernels  # cpu_kernels.load_cpu_kernels(), when they built
        self._planned_for: AttentionMetadata | None = None
        self._block_size = 0
        # the step's sequences by kind (decode, longer), each kind's group planned on first use: when
        # the kernel serves every layer's decode rows, their group is never needed
        self._kinds: tuple[list[int], list[int]] = ([], [])
        self._groups: dict[int, _Group] = {}
        self._in_order = False  # one decode group whose rows are the packed batch, in order
        # Decode rows whose sequences share prompt blocks (a prompt's n samples): read them once.
        self._cascade: CascadePlan | None = None
        self._decode_rows: DecodeRows | None = None  # the kernel's view of the decode rows
        self._workspace = Workspace()  # gather destinations reused by every layer and step

    def __call__(
        self,
        query: torch.Tensor,  # [T, num_heads, head_dim]
        key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
        value_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
        sliding_window: int | None = None,
        softcap: float | None = None,
        *,
        chunk_size: int | None = None,  # chunked local attention (Llama 4), as in the reference
        **features: object,
    ) -> torch.Tensor:  # [T, num_heads, v_head_dim] (V may be narrower than K: MLA)
        if softcap is not None or any(value is not None for value in features.values()):
            return paged_attention_ref.paged_attention(
                query, key_cache, value_cache, meta, scale, sliding_window, softcap, chunk_size=chunk_size,
                **features,
            )  # fmt: skip
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        if meta is not self._planned_for:
            self._plan(meta, key_cache.shape[1], query.device)
        masking = (sliding_window, chunk_size)
        kernel = self._decode_rows is not None and can_run(self._kernels, query, key_cache, value_cache)
        cascade = self._cascade if masking == (None, None) and not kernel else None
        if self._in_order and kernel:
            return self._decode_with_kernel(query, key_cache, value_cache, scale, masking)
        if self._in_order and cascade is None:
            group = self._group(0, meta, query.device)
            return _attend(query, key_cache, value_cache, group, scale, masking, self._buffer)
        out = query.new_empty(*query.shape[:2], value_cache.shape[-1])
        if kernel:
            out[self._decode_rows.rows] = self._decode_with_kernel(
                query, key_cache, value_cache, scale, masking
            )
        elif cascade is not None:
            cascade_attention(query, key_cache, value_cache, cascade, scale, out, self._buffer)
        decode_done = kernel or cascade is not None  # the decode rows, attended above
        for kind in (1,) if decode_done else (0, 1):
            if not self._kinds[kind]:
                continue
            group = self._group(kind, meta, query.device)
            o = _attend(query[group.rows], key_cache, value_cache, group, scale, masking, self._buffer)
            if group.valid is None:
                out[group.rows] = o
            else:
                out[group.rows[group.valid]] = o[group.valid]
        return out

    def _decode_with_kernel(
        self,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        scale: float,
        masking: tuple[int | None, int | None],
    ) -> torch.Tensor:  # [decode rows, H, Dv]
        plan = self._decode_rows
        return decode_attention(self._kernels, query, key_cache, value_cache, plan, scale, masking)

    def _buffer(self, name: str, like: torch.Tensor, numel: int) -> torch.Tensor:
        return self._workspace.get(name, (numel,), like.dtype, like.device)

    def _group(self, kind: int, meta: AttentionMetadata, device: torch.device) -> _Group:
        """The group of the step's decode (0) or longer (1) sequences, planned once per step."""
        if kind not in self._groups:
            self._groups[kind] = _plan_group(meta, self._kinds[kind], self._block_size, device)
        return self._groups[kind]

    def _plan(self, meta: AttentionMetadata, block_size: int, device: torch.device) -> None:
        decode = [s for s, q_len in enumerate(meta.query_lens_cpu) if q_len == 1]
        other = [s for s, q_len in enumerate(meta.query_lens_cpu) if q_len > 1]
        self._kinds, self._groups, self._block_size = (decode, other), {}, block_size
        self._in_order = not other and len(decode) == sum(meta.query_lens_cpu)
        kernel = self._kernels is not None and decode
        self._decode_rows = plan_decode_rows(meta, decode, self._in_order) if kernel else None
        fraction = self.cascade_read_fraction
        self._cascade = (
            plan_cascade(meta, decode, block_size, device, fraction) if decode and not kernel else None
        )
        self._planned_for = meta


def _plan_group(meta: AttentionMetadata, seqs: list[int], block_size: int, device: torch.device) -> _Group:
    """Host lists give only shapes (the host lengths may be an upper bound); positions come from the
    device-side seq_lens, as in the reference."""
    starts = [0]
    for q_len in meta.query_lens_cpu[:-1]:
        starts.append(starts[-1] + q_len)
    q_lens = [meta.query_lens_cpu[s] for s in seqs]
    max_q = max(q_lens)
    blocks_per_seq = (max(meta.seq_lens_cpu[s] for s in seqs) + block_size - 1) // block_size
    rows = [
        starts[s] + min(j, q_len - 1) for s, q_len in zip(seqs, q_lens, strict=True) for j in range(max_q)
    ]
    valid = [j < q_len for q_len in q_lens for j in range(max_q)]
    seq_idx = torch.tensor(seqs, device=device)
    seq_lens = meta.seq_lens[seq_idx].long().view(len(seqs), 1, 1, 1)
    first_q = seq_lens - torch.tensor(q_lens, device=device).view(len(seqs), 1, 1, 1)
    return _Group(
        rows=torch.tensor(rows, device=device),
        valid=None if all(valid) else torch.tensor(valid, device=device),
        blocks=meta.block_tables[seq_idx, :blocks_per_seq].reshape(-1).long(),
        q_pos=first_q + torch.arange(max_q, device=device).view(1, 1, max_q, 1),
        seq_lens=seq_lens,
        num_seqs=len(seqs),
        max_q=max_q,
        num_keys=blocks_per_seq * block_size,
    )


def _attend(
    query: torch.Tensor,  # [S * max_q, H, D], the group's rows in order
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    group: _Group,
    scale: float,
    masking: tuple[int | None, int | None],  # (sliding window, chunk size)
    buffer: Callable[[str, torch.Tensor, int], torch.Tensor],
) -> torch.Tensor:  # [S * max_q, H, Dv]
    num_heads, head_dim = query.shape[1:]
    v_head_dim = value_cache.shape[-1]
    num_kv_heads = key_cache.shape[2]
    size, s, q_len = num_heads // num_kv_heads, group.num_seqs, group.max_q
    k = _gather(key_cache, group, buffer("k", key_cache, group.blocks.numel() * key_cache[0].numel()))
    v = _gather(value_cache, group, buffer("v", value_cache, group.blocks.numel() * value_cache[0].numel()))
    # q: [S, Hkv, G * max_q, D], rows ordered (head in group, query); the mask repeats per head
    q = query.view(s, q_len, num_kv_heads, size, head_dim).permute(0, 2, 3, 1, 4)
    q = q.reshape(s, num_kv_heads, size * q_len, head_dim).to(k.dtype)
    mask = group.mask(*masking)
    if q_len > 1:
        mask = mask[:, :, None].expand(s, 1, size, q_len, group.num_keys).reshape(s, 1, size * q_len, -1)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    o = o.view(s, num_kv_heads, size, q_len, v_head_dim).permute(0, 3, 1, 2, 4)
    return o.reshape(s * q_len, num_heads, v_head_dim).to(query.dtype)


def _gather(cache: torch.Tensor, group: _Group, out: torch.Tensor) -> torch.Tensor:
    """[S, Hkv, L, D]: a view of the group's blocks copied, in order, into `out`."""
    num_blocks, block_size, num_kv_heads, head_dim = cache.shape
    flat = out.view(group.blocks.numel(), -1)
    torch.index_select(cache.view(num_blocks, -1), 0, group.blocks, out=flat)
    return flat.view(group.num_seqs, group.num_keys, num_kv_heads, head_dim).transpose(1, 2)
