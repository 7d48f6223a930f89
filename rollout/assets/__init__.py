"""Files shipped inside the package, so the CLI, demo, examples and tests run offline with no model hub."""

from __future__ import annotations

from pathlib import Path


def default_model_path() -> Path:
    """The embedded default model: a tiny Llama that does multi-digit addition, imperfectly.

    A Hugging Face folder (config.json, model.safetensors, tokenizer files, generation_config.json,
    CHECKSUMS.json) for `AutoModelForCausalLM.from_pretrained` / `AutoTokenizer.from_pretrained`.
    Its task and reward live in `rollout.tasks.addition`; see docs/default_model.md.
    """
    return Path(__file__).resolve().parent / "default_model"
