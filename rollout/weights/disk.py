"""The disk transport: a `save_pretrained`-compatible safetensors checkpoint both sides can read.

Single-file (`model.safetensors`) and sharded (`model.safetensors.index.json` + shards)
checkpoints load the same way; tied weights are written once, as `save_pretrained` does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from rollout.weights.manifest import NamedTensors, unique_named_tensors

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def save_checkpoint(
    named_tensors: NamedTensors, directory: str | os.PathLike, max_shard_bytes: int | None = None
) -> Path:
    """Writes the tensors as safetensors into `directory` (sharded past `max_shard_bytes`); returns it.

    Tied tensors are written once, under their first name (safetensors refuses shared memory).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.to("cpu").contiguous() for name, t in unique_named_tensors(named_tensors)}
    shards = _shard(tensors, max_shard_bytes)
    if len(shards) == 1:
        save_file(shards[0], directory / SINGLE_FILE, metadata={"format": "pt"})
        return directory
    weight_map = {}
    for number, shard in enumerate(shards, start=1):
        filename = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, directory / filename, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, filename))
    total = sum(t.nbytes for shard in shards for t in shard.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / INDEX_FILE).write_text(json.dumps(index, indent=2))
    return directory


def load_checkpoint(directory: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Reads every tensor of a checkpoint directory (or a single .safetensors file) onto the CPU."""
    tensors: dict[str, torch.Tensor] = {}
    for file in checkpoint_files(Path(directory)):
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open is not a Mapping)
                tensors[name] = handle.get_tensor(name)
    return tensors


def checkpoint_files(path: Path) -> list[Path]:
    if path.is_file() and path.suffix == ".safetensors":
        return [path]
    if (path / INDEX_FILE).is_file():
        weight_map = json.loads((path / INDEX_FILE).read_text())["weight_map"]
        return [path / name for name in sorted(set(weight_map.values()))]
    if (path / SINGLE_FILE).is_file():
        return [path / SINGLE_FILE]
    shards = sorted(path.glob("*.safetensors")) if path.is_dir() else []
    if not shards:
        raise FileNotFoundError(f"path: no safetensors checkpoint at {str(path)!r}")
    return shards


def _shard(tensors: dict[str, torch.Tensor], max_shard_bytes: int | None) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        if max_shard_bytes is not None and shards[-1] and size + tensor.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += tensor.nbytes
    return shards
