"""Loads a Hugging Face causal LM and prepares it for the engine (device, dtype, paged attention)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    ProcessorMixin,
)

from rollout.config import EngineConfig
from rollout.engine.hybrid.recurrent_layers import attention_layer_indices
from rollout.engine.model.model_guard import check_stateful_layers
from rollout.engine.model.shared_attention import index_shared_attention
from rollout.engine.requests.validation import RequestLimits
from rollout.engine.vision.vision_model import check_image_model, takes_images
from rollout.hf import attention as hf_attention
from rollout.hf import fused_modules
from rollout.hf.attention_scope import set_engine_attention, uses_engine_attention
from rollout.multimodal.processor_parts import ImageTextProcessor, load_processor

logger = logging.getLogger(__name__)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelInfo:
    name: str
    architecture: str
    dtype: str
    device: str
    max_model_len: int
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    block_size: int
    num_blocks: int

    @classmethod
    def of(
        cls, model: PreTrainedModel, name: str | None, limits: RequestLimits, block_size: int, num_blocks: int
    ) -> ModelInfo:
        """What the engine reports about its model (`limits`: its context, vocabulary and EOS ids); `name`
        defaults to the model's own path or class."""
        return cls(
            name=name or getattr(model.config, "_name_or_path", "") or type(model).__name__,
            architecture=type(model).__name__,
            dtype=str(model.dtype).removeprefix("torch."),
            device=str(model.device),
            max_model_len=limits.max_model_len,
            vocab_size=limits.vocab_size,
            eos_token_ids=tuple(sorted(limits.eos_token_ids)),
            block_size=block_size,
            num_blocks=num_blocks,
        )


def resolve_device(config: EngineConfig) -> torch.device:
    if config.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(config.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device is {config.device!r} but CUDA is not available")
    return device


def resolve_dtype(config: EngineConfig, device: torch.device, model_dtype: torch.dtype | None) -> torch.dtype:
    if config.dtype != "auto":
        return _DTYPES[config.dtype]
    if device.type == "cpu":
        return torch.float32  # bf16 matmuls are slow on most CPUs
    return model_dtype if model_dtype in (torch.bfloat16, torch.float16) else torch.bfloat16


TokenizerArg = PreTrainedTokenizerBase | str | os.PathLike | None


def load_pretrained(
    path: str | os.PathLike, config: EngineConfig, tokenizer: TokenizerArg = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase | None]:
    """The model at `path` on the configured device/dtype, and its tokenizer (see `resolve_tokenizer`)."""
    device = resolve_device(config)
    images = takes_images(path)  # an image-text-to-text model: its processor too (vision/vision_model.py)
    model = (AutoModelForImageTextToText if images else AutoModelForCausalLM).from_pretrained(
        path, dtype="auto"
    )
    model = model.to(device=device, dtype=resolve_dtype(config, device, model.dtype))
    if images and tokenizer is None:
        return model, load_processor(path)
    return model, resolve_tokenizer(tokenizer, path)


def resolve_tokenizer(
    tokenizer: TokenizerArg, model_path: str | os.PathLike | None = None
) -> PreTrainedTokenizerBase | None:
    """A tokenizer object as given; a path the user named must load; the model's own directory may lack one."""
    if isinstance(tokenizer, (PreTrainedTokenizerBase, ProcessorMixin, ImageTextProcessor)):  # with images
        return tokenizer
    if tokenizer is not None:
        try:
            return AutoTokenizer.from_pretrained(tokenizer)
        except Exception as exc:  # a path the user named must load, whatever the reason it did not
            raise ValueError(
                f"tokenizer: cannot load a tokenizer from {str(tokenizer)!r}: {type(exc).__name__}: {exc}"
            ) from exc
    if model_path is None:
        return None
    try:
        return AutoTokenizer.from_pretrained(model_path)
    except Exception as exc:  # weights-only, or a tokenizer needing a missing package: token ids only
        logger.warning(
            "no usable tokenizer in %s (%s: %s); serving token ids only (text and chat prompts are refused)",
            model_path,
            type(exc).__name__,
            exc,
        )
        return None


def prepare_model(model: PreTrainedModel, config: EngineConfig) -> PreTrainedModel:
    """Puts an in-memory model on the configured device/dtype, switches it to paged attention and, on
    the CPU, to the fused modules (hf/fused_modules.py) inside the engine."""
    check_image_model(model)  # an image-text-to-text family the engine does not serve is named first
    shards = getattr(model, "_tp_size", None) or 1
    if shards != config.tensor_parallel_size:
        raise ValueError(
            f"tensor_parallel_size is {config.tensor_parallel_size} but the model is sharded over {shards} "
            "rank(s); with tensor_parallel_size > 1 pass a model path: each rank loads its own shard"
        )
    if config.device != "auto" or config.dtype != "auto":
        device = resolve_device(config) if config.device != "auto" else model.device
        model = model.to(device=device, dtype=resolve_dtype(config, device, model.dtype))
    hf_attention.register()
    set_engine_attention(model)  # an image-text model's language model only (hf/attention_scope.py)
    if not uses_engine_attention(model):
        raise ValueError(f"{type(model).__name__} does not support transformers' attention interface")
    index_shared_attention(model)  # Zamba2: attention told its layer at call time gets it now
    _check_layer_indices(model)
    if config.tensor_parallel_size == 1:  # a probe would run one rank's sharded modules alone
        fused_modules.install(model)
    return model.eval()


def _check_layer_indices(model: PreTrainedModel) -> None:
    check_stateful_layers(model)  # an unsupported recurrent layer is named before the layer count
    expected = attention_layer_indices(model)  # every layer, but a hybrid's recurrent ones
    attention = [
        (name, m.layer_idx)
        for name, m in model.named_modules()
        if hasattr(m, "layer_idx") and hasattr(m, "is_causal") and m.is_causal
    ]
    indices = sorted(index for _, index in attention)
    if indices != expected:
        raise ValueError(
            f"{type(model).__name__}: expected one causal attention module per attention layer "
            f"({_spans(expected)}), found {len(indices)} at {_spans(sorted(set(indices)))}; "
            f"{_layer_causes(model, expected, attention)}; this "
            "architecture is not supported"
        )


def _layer_causes(model: PreTrainedModel, expected: list[int], attention: list[tuple[str, int]]) -> str:
    """Why the attention modules do not line up with the layers: shared indices, layers without one (what
    they hold instead), indices no module holds."""
    holders: dict[int, list[str]] = {}
    for name, index in attention:
        holders.setdefault(index, []).append(name)
    causes = []
    shared = [(i, names) for i, names in sorted(holders.items()) if len(names) > 1]
    if shared:
        index, names = shared[0]
        causes.append(
            f"{len(shared)} layer index(es) held by several attention modules (layer_idx {index}: "
            f"{', '.join(names[:3])}): the model runs layers more than once per forward or shares their indices"
        )
    missing = [i for i in expected if i not in holders]
    layers = _layer_list(model)
    inside = [i for i in missing if layers is not None and i < len(layers[1])]
    if inside:
        causes.append(_describe_layers(model, inside))
    beyond = [i for i in missing if i not in inside]
    if beyond:
        held = f"its layer list {layers[0]} has {len(layers[1])}" if layers else "it has no layer list"
        causes.append(
            f"no attention module has layer_idx {_spans(beyond)} (config.num_hidden_layers is "
            f"{model.config.get_text_config().num_hidden_layers}; {held})"
        )
    extra = sorted(set(holders) - set(expected))
    if extra:
        causes.append(f"attention modules at layers the engine expects none ({_spans(extra)})")
    return "; ".join(causes) or "the attention modules do not line up with the layers"


def _layer_list(model: PreTrainedModel) -> tuple[str, torch.nn.ModuleList] | None:
    return next(
        (
            (name, m)
            for name, m in model.named_modules()
            if name.endswith("layers") and isinstance(m, torch.nn.ModuleList)
        ),
        None,
    )


def _describe_layers(model: PreTrainedModel, layer_indices: list[int]) -> str:
    """What sits where the engine looked for attention: each layer's token mixers (not norms or MLPs)."""
    name, modules = _layer_list(model)
    described = []
    for i in layer_indices[:4]:
        mixers = [
            f"{child}: {type(m).__name__}"
            for child, m in modules[i].named_children()
            if not any(word in child.lower() for word in ("norm", "mlp", "moe", "ffn", "dropout"))
        ]
        described.append(f"{name}.{i} holds {', '.join(mixers) or type(modules[i]).__name__}")
    return "layers without one: " + "; ".join(described)


def _spans(indices: list[int]) -> str:
    """[0, 1, 2, 5, 5] -> '0-2, 5, 5': a list of layer indices, short."""
    parts: list[list[int]] = []
    for i in indices:
        if parts and i == parts[-1][-1] + 1:
            parts[-1].append(i)
        else:
            parts.append([i])
    return ", ".join(f"{p[0]}-{p[-1]}" if len(p) > 2 else ", ".join(map(str, p)) for p in parts) or "none"


def model_max_len(model: PreTrainedModel) -> int | None:
    """The context length the config declares; None when it declares none (Mamba: no positions)."""
    text_config = model.config.get_text_config()
    for name in ("max_position_embeddings", "n_positions", "seq_length"):
        value = getattr(text_config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None) -> tuple[int, ...]:
    candidates = []
    if model.generation_config is not None:
        candidates.append(model.generation_config.eos_token_id)
    candidates.append(model.config.get_text_config().eos_token_id)
    if tokenizer is not None:
        candidates.append(tokenizer.eos_token_id)
    for value in candidates:
        if value is not None:
            return tuple(value) if isinstance(value, (list, tuple)) else (int(value),)
    return ()
