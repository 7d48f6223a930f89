"""Updates are written in place (same storage), keep tied weights tied, and stage streamed bytes."""

import pytest
import torch

from rollout.weights.manifest import Manifest, WeightUpdateError
from rollout.weights.streaming import iter_byte_chunks
from rollout.weights.updater import StagedWeights, apply_named_tensors, check_next_version
from tests.builders import tiny_model


def test_update_keeps_every_parameter_storage() -> None:
    model = tiny_model()
    pointers = {name: p.data_ptr() for name, p in model.named_parameters()}
    update = {name: torch.randn_like(t) for name, t in model.state_dict().items()}
    apply_named_tensors(model, update)
    for name, param in model.named_parameters():
        assert param.data_ptr() == pointers[name]
        assert torch.equal(param, update[name])


@pytest.mark.parametrize("name", ["model.embed_tokens.weight", "lm_head.weight"])
def test_tied_embeddings_stay_tied_whichever_name_is_sent(name: str) -> None:
    model = tiny_model(tie_word_embeddings=True)
    new = torch.randn(128, 64)
    assert apply_named_tensors(model, {name: new}) == 1
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert torch.equal(model.lm_head.weight, new)


def test_tied_embeddings_sent_under_both_names_are_written_once() -> None:
    model = tiny_model(tie_word_embeddings=True)
    update = {name: torch.randn_like(t) for name, t in model.state_dict().items()}
    written = apply_named_tensors(model, update)
    assert written == len(update) - 1
    assert torch.equal(model.lm_head.weight, update["model.embed_tokens.weight"])


def test_named_buffers_are_updatable() -> None:
    model = tiny_model()
    name, buffer = next(iter(model.named_buffers()))
    apply_named_tensors(model, {name: torch.ones_like(buffer)})
    assert torch.equal(dict(model.named_buffers())[name], torch.ones_like(buffer))


def test_version_must_increase() -> None:
    assert check_next_version(3, None) == 4
    assert check_next_version(3, 10) == 10
    with pytest.raises(WeightUpdateError, match="version"):
        check_next_version(3, 3)


def tensors_for_staging() -> dict[str, torch.Tensor]:
    return {
        "a": torch.randn(5, 7),
        "b": torch.randn(3).to(torch.bfloat16),
        "c": torch.arange(11, dtype=torch.int64),
        "d": torch.tensor(1.5),
    }


@pytest.mark.parametrize("chunk_bytes", [1, 7, 64, 10_000])
def test_staged_bytes_reassemble_tensors_split_across_chunks(chunk_bytes: int) -> None:
    tensors = tensors_for_staging()
    staged = StagedWeights(Manifest.of(tensors))
    chunks = list(iter_byte_chunks(tensors.values(), chunk_bytes))
    assert all(len(data) <= chunk_bytes for _, data in chunks)
    for offset, data in chunks:
        staged.write_bytes(offset, data)
    for name, tensor in staged.named_tensors().items():
        assert torch.equal(tensor, tensors[name])


def test_incomplete_stage_is_refused() -> None:
    tensors = tensors_for_staging()
    staged = StagedWeights(Manifest.of(tensors))
    offset, data = next(iter_byte_chunks(tensors.values(), 16))
    staged.write_bytes(offset, data)
    with pytest.raises(WeightUpdateError, match="incomplete"):
        staged.named_tensors()


def test_out_of_order_chunk_is_refused() -> None:
    staged = StagedWeights(Manifest.of(tensors_for_staging()))
    with pytest.raises(WeightUpdateError, match="expected byte 0"):
        staged.write_bytes(8, b"\0" * 8)
