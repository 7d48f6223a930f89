"""Weight updates from a safetensors checkpoint directory, against a real server on loopback."""

from pathlib import Path

import pytest

from rollout.client.weight_push import WeightSyncError
from tests.builders import tiny_model
from tests.server.server_builders import client_for
from tests.weights.server_builders import greedy_tokens, reference_tokens, weight_server


def test_disk_update_written_by_the_client_serves_the_new_weights(tmp_path: Path) -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        version = client.update_weights(
            tiny_model(seed=1), transport="disk", path=tmp_path, max_shard_bytes=50_000
        )
        assert version == 1
        assert greedy_tokens(client) == reference_tokens(1)


def test_disk_update_loads_a_save_pretrained_checkpoint(tmp_path: Path) -> None:
    tiny_model(seed=2).save_pretrained(tmp_path)
    with weight_server(seed=0) as server, client_for(server) as client:
        assert client.update_weights(None, transport="disk", path=tmp_path, version=3) == 3
        assert greedy_tokens(client) == reference_tokens(2)


def test_missing_checkpoint_is_not_found_and_the_old_weights_keep_serving(tmp_path: Path) -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(None, transport="disk", path=tmp_path / "missing")
        assert info.value.failures[server.address].startswith("NOT_FOUND")
        assert greedy_tokens(client) == reference_tokens(0)
        assert server.loop.engine.weight_version == 0
