"""Safetensors checkpoints: what is saved loads back, single-file or sharded, and tied weights once."""

import json
from pathlib import Path

import pytest
import torch

from rollout.weights.disk import INDEX_FILE, SINGLE_FILE, load_checkpoint, save_checkpoint
from tests.builders import tiny_model


def test_single_file_checkpoint_round_trips(tmp_path: Path) -> None:
    state = tiny_model().state_dict()
    save_checkpoint(state, tmp_path)
    assert (tmp_path / SINGLE_FILE).is_file()
    loaded = load_checkpoint(tmp_path)
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[name], state[name]) for name in state)


def test_sharded_checkpoint_round_trips(tmp_path: Path) -> None:
    state = tiny_model().state_dict()
    save_checkpoint(state, tmp_path, max_shard_bytes=40_000)
    weight_map = json.loads((tmp_path / INDEX_FILE).read_text())["weight_map"]
    assert len(set(weight_map.values())) > 1
    loaded = load_checkpoint(tmp_path)
    assert all(torch.equal(loaded[name], state[name]) for name in state)


def test_tied_weights_are_saved_once(tmp_path: Path) -> None:
    model = tiny_model(tie_word_embeddings=True)
    save_checkpoint(model.state_dict(), tmp_path)
    loaded = load_checkpoint(tmp_path)
    assert "model.embed_tokens.weight" in loaded and "lm_head.weight" not in loaded


def test_save_pretrained_checkpoint_loads(tmp_path: Path) -> None:
    model = tiny_model()
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path)
    assert all(torch.equal(loaded[name], t) for name, t in model.state_dict().items())


def test_missing_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no safetensors checkpoint"):
        load_checkpoint(tmp_path / "nowhere")
