"""Packed buckets: both sides derive the same plan from the manifest, and unpacking restores every tensor."""

import torch

from rollout.weights.buckets import pack, plan_buckets, unpack
from rollout.weights.manifest import Manifest


def mixed_tensors() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shapes = [(4, 4), (3,), (10, 2), (1,), (5, 5)]
    tensors = [torch.randn(s, generator=g) for s in shapes]
    tensors[1] = tensors[1].to(torch.bfloat16)
    tensors[3] = tensors[3].to(torch.bfloat16)
    return tensors


def test_buckets_hold_one_dtype_and_respect_the_size_limit() -> None:
    tensors = mixed_tensors()
    manifest = Manifest.of({str(i): t for i, t in enumerate(tensors)})
    buckets = plan_buckets(manifest, bucket_bytes=100)
    assert sorted(i for b in buckets for i in b.indices) == list(range(len(tensors)))
    for bucket in buckets:
        assert {manifest.tensors[i].dtype for i in bucket.indices} == {bucket.dtype}
        assert len(bucket.indices) == 1 or sum(manifest.tensors[i].nbytes for i in bucket.indices) <= 100


def test_a_tensor_larger_than_a_bucket_travels_alone() -> None:
    manifest = Manifest.of({"big": torch.zeros(100), "small": torch.zeros(2)})
    assert [b.indices for b in plan_buckets(manifest, bucket_bytes=16)] == [(0,), (1,)]


def test_pack_then_unpack_restores_every_tensor() -> None:
    tensors = mixed_tensors()
    manifest = Manifest.of({str(i): t for i, t in enumerate(tensors)})
    restored = {}
    for bucket in plan_buckets(manifest, bucket_bytes=64):
        flat = pack(bucket, tensors, torch.device("cpu"))
        for index, view in unpack(bucket, flat, manifest):
            restored[index] = view.view(manifest.tensors[index].shape)
    assert all(torch.equal(restored[i], t) for i, t in enumerate(tensors))
