"""`rollout generate`: flags for the other target are refused, a server that does not answer is one
line, and every sampling flag shows its help and SamplingParams' default."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import pytest

from rollout.cli import build_parser, main
from rollout.sampling_params import SamplingParams


def prompts(tmp_path: Path) -> Path:
    src = tmp_path / "in.jsonl"
    src.write_text('{"prompt_token_ids": [1, 5, 14]}\n')
    return src


def test_model_with_server_is_a_usage_error(tmp_path: Path, capsys) -> None:
    """--model was silently ignored: the server's model answered."""
    argv = [
        "generate",
        "-i",
        str(prompts(tmp_path)),
        "--server",
        "127.0.0.1:1",
        "--model",
        "x",
        "--max-num-seqs",
        "4",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rollout generate: error: with --server, --model --max-num-seqs would be ignored")
    assert "\n" not in err


def test_a_token_without_server_is_a_usage_error(tmp_path: Path, capsys) -> None:
    assert main(["generate", "-i", str(prompts(tmp_path)), "--token", "t"]) == 2
    assert "without --server, --token would be ignored" in capsys.readouterr().err


def test_no_server_listening_is_one_line(tmp_path: Path, capsys) -> None:
    """It was a raw gRPC traceback."""
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
    with pytest.raises(SystemExit) as exit_:
        main(
            ["generate", "-i", str(prompts(tmp_path)), "-o", str(tmp_path / "out.jsonl"), "--server", address]
        )
    assert (
        exit_.value.code
        == f"rollout generate: no rollout server answers at {address}; start one (rollout serve) or fix --server"
    )


def test_every_sampling_flag_shows_help_and_the_sampling_params_default() -> None:
    parser = build_parser()
    generate = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[
        "generate"
    ]
    (group,) = [g for g in generate._action_groups if g.title.startswith("sampling")]
    defaults = SamplingParams()
    for action in group._group_actions:
        default = getattr(defaults, action.dest)
        assert action.help and "(default " in action.help, action.dest
        assert action.default == (list(default) if isinstance(default, tuple) else default), action.dest
