"""Every usage or input error of `rollout`, as a new user meets it: one line that names the fix, exit 2,
before torch is imported (a fresh process each, so nothing an earlier test imported hides an import).

They printed tracebacks (a missing input file, bench's missing model), waited for torch and transformers
(a missing model, a bad engine option: 10-110 s), printed the whole usage before the line, or exited 0
on an empty input.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.serve_process import REPO_ROOT

# Runs the CLI; its last stderr line says whether torch was imported by the time it exited.
CLI = (
    "import sys, runpy; sys.argv = ['rollout', *sys.argv[1:]]\n"
    "try:\n    runpy.run_module('rollout.cli', run_name='__main__')\n"
    "finally:\n    print('torch imported:', 'torch' in sys.modules, file=sys.stderr)"
)


def rollout(*argv: str, stdin: str = "", env: dict[str, str | None] | None = None) -> tuple[int, list[str]]:
    """Exit status and stderr lines (the torch line checked and dropped) of `rollout *argv`; `env`
    changes the environment (None: unset)."""
    environ = {**os.environ, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-c", CLI, *argv],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={k: v for k, v in environ.items() if v is not None},
        timeout=300,  # a hang guard; the errors come in about a second
    )
    lines = done.stderr.strip().splitlines()
    assert lines and lines[-1] == "torch imported: False", done.stderr
    return done.returncode, lines[:-1]


def assert_usage_error(argv: list[str], *fragments: str, **kwargs) -> str:
    code, lines = rollout(*argv, **kwargs)
    assert code == 2 and len(lines) == 1, lines
    assert all(f in lines[0] for f in fragments), lines[0]
    return lines[0]


@pytest.fixture
def no_such(tmp_path: Path) -> Path:
    return tmp_path / "no_such"


def test_a_missing_input_file(no_such: Path) -> None:
    assert_usage_error(["generate", "-i", str(no_such)], f"--input {no_such}: No such file", "or - for stdin")


@pytest.mark.parametrize("text", ["", "\n  \n"], ids=["empty", "blank lines"])
def test_an_input_without_prompts(text: str, tmp_path: Path) -> None:
    """It exited 0 and wrote nothing."""
    src = tmp_path / "in.jsonl"
    src.write_text(text)
    assert_usage_error(["generate", "-i", str(src)], f"--input {src}: no prompts", "prompt, messages")
    assert_usage_error(["generate"], "stdin: no prompts", stdin=text)


def test_an_output_folder_that_does_not_exist(no_such: Path, tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"prompt_token_ids": [1, 2]}\n')
    out = no_such / "out.jsonl"
    assert_usage_error(["generate", "-i", str(src), "-o", str(out)], f"--output {out}: no directory")


@pytest.mark.parametrize("command", ["generate", "serve", "bench"])
def test_a_missing_model_directory(command: str, no_such: Path) -> None:
    """generate took 10-35 s to say it, bench printed a traceback."""
    argv = [command, "--model", str(no_such), *(["--port", "0"] if command == "serve" else [])]
    assert_usage_error(argv, f"--model {no_such}: no such directory")


def test_a_folder_without_a_model(tmp_path: Path) -> None:
    assert_usage_error(["generate", "--model", str(tmp_path)], "no config.json in this directory")


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--dtype", "bf16"], "--dtype bf16: dtype must be auto, float32, bfloat16 or float16"),
        (["--num-blocks", "0"], "--num-blocks 0: num_blocks must be"),
        (["--block-size", "-16"], "--block-size -16: block_size"),
    ],
    ids=str,
)
@pytest.mark.parametrize("command", ["generate", "serve"])
def test_an_invalid_engine_option_names_its_flag(command: str, argv: list[str], fragment: str) -> None:
    """They were reported after torch and transformers loaded (37-110 s)."""
    assert_usage_error([command, *argv, *(["--port", "0"] if command == "serve" else [])], fragment)


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["serve", "--port", "99999"], ["rollout serve: error: argument --port: 99999 is not a port"]),
        (["serve", "--grace", "-1"], ["argument --grace: -1 is not >= 0"]),
        (["serve", "--max-message-mb", "0"], ["argument --max-message-mb: 0 is not >= 1"]),
        (["generate", "--batch-size", "0"], ["argument --batch-size: 0 is not >= 1"]),
        (["generate", "--top-p", "0"], ["--top-p 0.0: top_p must be in (0, 1]"]),
        (["generate", "--stop-token-ids", "3", "-5"], ["--stop-token-ids 3 -5: stop_token_ids must be >= 0"]),
        (["bench", "--prompts", "0"], ["rollout bench: error: argument --prompts: 0 is not >= 1"]),
        (["bench", "--prompt-len", "9", "3"], ["--prompt-len 9 3: MIN is above MAX"]),
        (["demo", "--rounds", "0"], ["rollout demo: error: argument --rounds: 0 is not >= 1"]),
        ([], ["rollout: error: name a command: serve, generate, fleet, bench or demo"]),
    ],
    ids=str,
)
def test_a_bad_value_is_one_line_without_the_usage(argv: list[str], fragments: list[str]) -> None:
    """argparse printed the whole usage (28 lines for serve) before its one-line message."""
    assert_usage_error(argv, *fragments)


@pytest.mark.parametrize(
    ("argv", "suggestion"),
    [
        (["servee"], "did you mean 'serve'?"),
        (["genrate"], "did you mean 'generate'?"),
        (["generate", "--max-tokns", "3"], "did you mean '--max-tokens'?"),
        (["serve", "--openai-prot", "0"], "did you mean '--openai-port'?"),
        (["generate", "--logprobs-mode", "rwa"], "did you mean 'raw'?"),
        (["bench", "--compare", "generat"], "did you mean 'generate'?"),
        (["demo", "--learnin-rate", "1"], "did you mean '--learning-rate'?"),
    ],
    ids=str,
)
def test_a_typo_gets_a_did_you_mean(argv: list[str], suggestion: str) -> None:
    assert_usage_error(argv, suggestion)


def closed_port_url() -> str:
    with socket.socket() as probe:  # a port nobody listens on: the connection is refused at once
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.mark.parametrize("command", ["generate", "serve", "bench"])
def test_an_uncached_hub_id_with_the_hub_unreachable(command: str, tmp_path: Path) -> None:
    """It retried for 58 s, printing each warning twice, then said it in a traceback or a long line."""
    env = {"HF_HUB_OFFLINE": None, "HF_ENDPOINT": closed_port_url(), "HF_HUB_CACHE": str(tmp_path)}
    argv = [command, "--model", "some-org/some-model", *(["--port", "0"] if command == "serve" else [])]
    assert_usage_error(argv, "not in the Hugging Face cache", "cannot be reached", env=env)


def test_an_uncached_hub_id_offline(tmp_path: Path) -> None:
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path)}
    assert_usage_error(["generate", "--model", "some-org/some-model"], "HF_HUB_OFFLINE is set", env=env)
