"""Every EngineConfig field is a flag of `serve` and `generate`; the memory knobs of hybrid models too."""

from __future__ import annotations

import argparse

import pytest

from rollout.cli import main
from rollout.commands.engine_args import add_engine_args, engine_config


def test_max_state_snapshots_is_an_engine_flag() -> None:
    parser = argparse.ArgumentParser()
    add_engine_args(parser)
    assert engine_config(parser.parse_args(["--max-state-snapshots", "3"])).max_state_snapshots == 3
    assert engine_config(parser.parse_args([])).max_state_snapshots is None  # derived from memory


@pytest.mark.parametrize("command", ["serve", "generate"])
def test_max_state_snapshots_is_listed_in_the_help(command: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--max-state-snapshots" in capsys.readouterr().out


def test_serve_takes_the_engine_logprobs_mode_and_generate_a_per_request_one(capsys) -> None:
    parser = argparse.ArgumentParser()
    add_engine_args(parser)
    assert engine_config(parser.parse_args(["--logprobs-mode", "raw_logits"])).logprobs_mode == "raw_logits"
    assert engine_config(parser.parse_args(["--logprobs-mode", "raw"])).logprobs_mode == "raw_logprobs"
    assert engine_config(parser.parse_args([])).logprobs_mode == "processed_logprobs"
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    assert "processed_logits" in capsys.readouterr().out  # generate's own --logprobs-mode, per request
