"""The weight-update manifest: what a trainer is about to send (names, shapes, dtypes).

Every transport sends the manifest first so the server can refuse a bad update before a single
byte of it is written; `validate_manifest` is that check, and `normalize_name` maps the names that
PEFT, DDP and torch.compile wrap around Hugging Face parameter names back to the model's own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import torch
from torch import nn

# Wrappers a trainer's model may sit in; the parameter names under them are the HF model's.
_WRAPPER_PREFIXES = ("base_model.model.", "module.", "_orig_mod.")
_LORA_MARKERS = ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_magnitude_vector")

NamedTensors = Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]


class WeightUpdateError(ValueError):
    """A weight update was refused; nothing was written and the previous version keeps serving."""


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One tensor of an update: its (trainer-side) name, shape and dtype name ("bfloat16", ...)."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @classmethod
    def of(cls, name: str, tensor: torch.Tensor) -> TensorSpec:
        return cls(name, tuple(tensor.shape), dtype_name(tensor.dtype))

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * torch.empty((), dtype=torch_dtype(self.dtype)).element_size()


@dataclass(frozen=True, slots=True)
class Manifest:
    """The ordered list of tensors an update carries; transports send tensor bytes in this order."""

    tensors: tuple[TensorSpec, ...]

    @classmethod
    def of(cls, named_tensors: NamedTensors) -> Manifest:
        return cls(tuple(TensorSpec.of(name, t) for name, t in iter_named_tensors(named_tensors)))

    @property
    def nbytes(self) -> int:
        return sum(spec.nbytes for spec in self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)


def iter_named_tensors(named_tensors: NamedTensors) -> Iterator[tuple[str, torch.Tensor]]:
    """Accepts a state dict, `named_parameters()` or any iterable of (name, tensor) pairs."""
    items = named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors
    for name, tensor in items:
        if not isinstance(tensor, torch.Tensor):
            raise WeightUpdateError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
        yield name, tensor.detach()


def unique_named_tensors(named_tensors: NamedTensors) -> list[tuple[str, torch.Tensor]]:
    """Drops later names of a storage already listed (tied embeddings): the server re-ties them."""
    seen: set[tuple[int, int, tuple[int, ...]]] = set()
    unique = []
    for name, tensor in iter_named_tensors(named_tensors):
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if tensor.numel() == 0 or key not in seen:
            seen.add(key)
            unique.append((name, tensor))
    return unique


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise WeightUpdateError(f"unknown dtype {name!r}")
    return dtype


def normalize_name(name: str) -> str:
    """Maps a trainer-side name to the HF model's name; refuses LoRA adapter tensors (lora.py reads them)."""
    parts = name.split(".")
    if any(marker in parts for marker in _LORA_MARKERS):
        raise WeightUpdateError(
            f"{name} is a LoRA adapter tensor; send it as an adapter update (client.update_weights(peft_model) "
            "sends the factors with their scaling) or merge the adapter before sending (peft: "
            "`merged = model.merge_and_unload()`, then send `merged.state_dict()`)"
        )
    return hf_name(name)


def hf_name(name: str) -> str:
    """`name` as the HF model names it: wrappers and PEFT's `.base_layer.` stripped (LoRA names too)."""
    return strip_wrappers(name).replace(".base_layer.", ".")


def strip_wrappers(name: str) -> str:
    """`name` without the PEFT, DDP and torch.compile prefixes around the HF model's names."""
    stripped = True
    while stripped:
        stripped = False
        for prefix in _WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name, stripped = name.removeprefix(prefix), True
    return name


def model_targets(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every updatable tensor by name, aliases included (tied embeddings appear under both names)."""
    targets = dict(model.named_parameters(remove_duplicate=False))
    targets.update(model.named_buffers(remove_duplicate=False))
    return targets


def validate_manifest(
    manifest: Manifest, targets: Mapping[str, torch.Tensor], allow_partial: bool = True
) -> dict[str, str]:
    """Checks every spec against the model; returns {sent name: model name} or raises naming all problems.

    Names aliasing one storage (tied embeddings) may both be sent; the caller writes the storage once.
    """
    problems: list[str] = []
    resolved: dict[str, str] = {}
    for spec in manifest.tensors:
        try:
            resolved[spec.name] = _check_spec(spec, targets)
        except WeightUpdateError as err:
            problems.append(str(err))
    problems += _duplicates(resolved)
    if not allow_partial:
        problems += _missing(resolved.values(), targets)
    if problems:
        raise WeightUpdateError("weight update refused, nothing written: " + "; ".join(problems))
    return resolved


def _check_spec(spec: TensorSpec, targets: Mapping[str, torch.Tensor]) -> str:
    name = normalize_name(spec.name)
    target = targets.get(name)
    if target is None:
        shown = spec.name if name == spec.name else f"{spec.name} (as {name})"
        raise WeightUpdateError(f"{shown}: no such parameter or buffer in the model")
    if tuple(target.shape) != spec.shape:
        raise WeightUpdateError(f"{spec.name}: shape {list(spec.shape)} != model's {list(target.shape)}")
    if spec.dtype != dtype_name(target.dtype):
        raise WeightUpdateError(
            f"{spec.name}: dtype {spec.dtype} != model's {dtype_name(target.dtype)} "
            f"(cast with .to(torch.{dtype_name(target.dtype)}) before sending)"
        )
    return name


def _duplicates(resolved: Mapping[str, str]) -> list[str]:
    seen: dict[str, str] = {}
    problems = []
    for sent, name in resolved.items():
        if name in seen:
            problems.append(f"{sent}: sent twice (also as {seen[name]})")
        seen.setdefault(name, sent)
    return problems


def _missing(names: Iterable[str], targets: Mapping[str, torch.Tensor]) -> list[str]:
    covered = {id(targets[name]) for name in names}
    missing = [name for name, t in targets.items() if id(t) not in covered and not _is_derived_buffer(name)]
    return [f"missing {', '.join(missing)} (a full update was required)"] if missing else []


def _is_derived_buffer(name: str) -> bool:
    return name.endswith("inv_freq") or name.endswith("original_inv_freq")
