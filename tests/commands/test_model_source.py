"""A Hub id the cache holds loads from the cache at once when the Hub cannot be reached (it went through
huggingface_hub's retries for a minute, each warning printed twice); with the Hub reachable nothing
changes."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import constants

from rollout.assets import default_model_path
from rollout.commands import model_source
from tests.serve_process import REPO_ROOT

REPO_ID = "some-org/cached-model"


def hub_cache(root: Path) -> Path:
    """A Hugging Face cache holding the embedded model as REPO_ID, laid out as huggingface_hub writes it."""
    repo = root / f"models--{REPO_ID.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    shutil.copytree(default_model_path(), repo / "snapshots" / ("0" * 40))
    return root


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture
def online_mode(monkeypatch, tmp_path: Path) -> None:
    """huggingface_hub as a machine without HF_HUB_OFFLINE sees it (the tests set it: conftest.py)."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache(tmp_path / "hub")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # restored after the test; the check sets it to 1


def test_a_cached_id_with_the_hub_unreachable_goes_offline_saying_so(
    online_mode, monkeypatch, caplog
) -> None:
    monkeypatch.setattr(constants, "ENDPOINT", closed_port_url())
    with caplog.at_level(logging.WARNING):
        model_source.check_model(REPO_ID)
    assert constants.HF_HUB_OFFLINE and os.environ["HF_HUB_OFFLINE"] == "1"
    (message,) = [r.getMessage() for r in caplog.records]
    assert "cannot be reached" in message and f"loading {REPO_ID} from the cache" in message


def test_a_cached_id_with_the_hub_reachable_stays_online(online_mode, monkeypatch) -> None:
    with socket.socket() as hub:
        hub.bind(("127.0.0.1", 0))
        hub.listen()
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{hub.getsockname()[1]}")
        model_source.check_model(REPO_ID)
    assert not constants.HF_HUB_OFFLINE and os.environ["HF_HUB_OFFLINE"] == "0"


def test_generate_loads_a_cached_id_at_once_when_the_hub_is_unreachable(tmp_path: Path) -> None:
    """End to end, in a process that was never told it is offline."""
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"prompt_token_ids": [5, 6, 7]}) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env |= {"HF_ENDPOINT": closed_port_url(), "HF_HUB_CACHE": str(hub_cache(tmp_path / "hub"))}
    argv = ["generate", "--model", REPO_ID, "-i", str(src), "--max-tokens", "3", "--ignore-eos"]
    done = subprocess.run(
        [sys.executable, "-m", "rollout.cli", *argv],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=600,  # a hang guard: loading the tiny model takes seconds
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(json.loads(done.stdout)["samples"][0]["token_ids"]) == 3
    assert done.stderr.count("cannot be reached") == 1 and "Retrying" not in done.stderr
