"""Does the server's model compute the same function as the trainer's? Compared setting by setting.

Same architecture, names and shapes is not enough: a different `rope_theta`, `hidden_act` or
`tie_word_embeddings` (the trainer never pushes a tied `lm_head`, so an untied server keeps its own)
makes the server sample another policy while every push succeeds. Every config entry is compared
except the ones below, which cannot change what the forward pass computes on the same weights.
"""

from __future__ import annotations

import json
from typing import Any

from transformers import PretrainedConfig

# Bookkeeping, labels, output switches and train-time-only settings; dtype is handled by the push.
NOT_FORWARD = frozenset(
    {
        "_name_or_path",
        "architectures",
        "transformers_version",
        "dtype",
        "torch_dtype",
        "id2label",
        "label2id",
        "problem_type",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "use_cache",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "sep_token_id",
        "decoder_start_token_id",
        "initializer_range",
        "initializer_factor",
        "tokenizer_class",
        "task_specific_params",
        "finetuning_task",
        "prefix",
        "chunk_size_feed_forward",
        "quantization_config",
        "gradient_checkpointing",
        "torchscript",
        "tf_legacy_loss",
        "use_bfloat16",
        "output_router_logits",
        "router_aux_loss_coef",
    }
)


def forward_differences(server_config_json: str, trainer_config: PretrainedConfig) -> list[str]:
    """`key: server X, trainer Y` for each forward-pass setting that differs (keys on one side only are skipped)."""
    server = json.loads(server_config_json)
    trainer = json.loads(trainer_config.to_json_string(use_diff=False))
    return [f"{key}: server {s!r}, trainer {t!r}" for key, s, t in _differences(server, trainer, "")]


def _differences(server: dict[str, Any], trainer: dict[str, Any], prefix: str) -> list[tuple[str, Any, Any]]:
    found = []
    for key in sorted(server.keys() & trainer.keys()):
        if key in NOT_FORWARD or key.endswith(("dropout", "pdrop")) or key.startswith("_"):
            continue
        s, t = server[key], trainer[key]
        if isinstance(s, dict) and isinstance(t, dict) and key.endswith("_config"):
            found += _differences(s, t, f"{prefix}{key}.")
        elif not _same(s, t):
            found.append((prefix + key, s, t))
    return found


def _same(a: Any, b: Any) -> bool:
    """Equal, with ints and floats compared by value (JSON writes 10000 and 10000.0 alike)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b
