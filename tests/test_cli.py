"""`rollout generate`: JSONL round trip in-process and against a server; bad lines named, none lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from rollout import EngineConfig
from rollout.cli import main
from rollout.engine_factory import load_engine
from tests.builders import CONVERSATION, char_tokenizer, tiny_model, tool_chat_tokenizer
from tests.server.hybrid_builders import HYBRIDS, MAX_MODEL_LEN, save_hybrid
from tests.server.server_builders import serving

CHAT_TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"


def save_model(path: Path, chat_template: str | None = None) -> Path:
    """A tiny model plus a character-level tokenizer (ids 3.. are characters) in `path`."""
    tiny_model("llama").save_pretrained(path)
    char_tokenizer(chat_template).save_pretrained(path)
    return path


def write_lines(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def run_generate(tmp: Path, src: Path, *extra: str) -> tuple[int, list[dict]]:
    out = tmp / "out.jsonl"
    code = main(
        ["generate", "-i", str(src), "-o", str(out), "--max-tokens", "5", "--temperature", "0", *extra]
    )
    return code, [json.loads(line) for line in out.read_text().splitlines()]


LINES = [
    {"prompt_token_ids": [5, 6, 7], "id": "a"},
    {"prompt": "hello world"},
    "{not json",
    {"prompt_token_ids": [5, 999]},
    {"prompt_token_ids": [8, 9], "sampling_params": {"n": 2, "logprobs": 1}},
    {"prompt_token_ids": [8], "sampling_params": {"n": 0}},
]


def test_generate_jsonl_in_process_names_bad_lines_and_keeps_the_rest(tmp_path: Path, capsys) -> None:
    model = save_model(tmp_path / "model")
    code, records = run_generate(tmp_path, write_lines(tmp_path / "in.jsonl", LINES), "--model", str(model))
    errors = capsys.readouterr().err
    assert code == 1
    assert [r["line"] for r in records] == [1, 2, 5]
    assert records[0]["id"] == "a" and records[0]["prompt_token_ids"] == [5, 6, 7]
    assert len(records[2]["samples"]) == 2 and len(records[2]["samples"][1]["logprobs"]) == 5
    assert all(
        s["finish_reason"] in ("stop", "length") and s["weight_version"] == 0
        for r in records
        for s in r["samples"]
    )
    assert isinstance(records[1]["samples"][0]["text"], str)
    assert "line 3: invalid JSON" in errors
    assert "line 4:" in errors and "prompt_token_ids" in errors
    assert "line 6: sampling_params.n must be >= 1" in errors


def test_generate_against_a_server_matches_in_process(tmp_path: Path) -> None:
    model = save_model(tmp_path / "model")
    src = write_lines(tmp_path / "in.jsonl", [LINES[0], LINES[1], LINES[4]])
    _, local = run_generate(tmp_path, src, "--model", str(model))
    with serving(load_engine(model)) as server:
        code, remote = run_generate(tmp_path, src, "--server", server.address)
    assert code == 0
    strip = [{k: v for k, v in r.items() if k != "request_id"} for r in local]
    assert [{k: v for k, v in r.items() if k != "request_id"} for r in remote] == strip


def test_chat_messages_use_the_chat_template(tmp_path: Path) -> None:
    model = save_model(tmp_path / "model", CHAT_TEMPLATE)
    src = write_lines(tmp_path / "in.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}])
    code, records = run_generate(tmp_path, src, "--model", str(model))
    assert code == 0
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model)
    assert (
        records[0]["prompt_token_ids"]
        == tokenizer("<user>hi<assistant>", add_special_tokens=False)["input_ids"]
    )


def test_tool_call_messages_reach_the_template_intact_in_process_and_through_a_server(tmp_path: Path) -> None:
    tiny_model("llama").save_pretrained(tmp_path / "model")
    tool_chat_tokenizer().save_pretrained(tmp_path / "model")
    src = write_lines(tmp_path / "in.jsonl", [{"messages": CONVERSATION}])
    _, local = run_generate(tmp_path, src, "--model", str(tmp_path / "model"))
    with serving(load_engine(tmp_path / "model")) as server:
        _, remote = run_generate(tmp_path, src, "--server", server.address)
    want = tool_chat_tokenizer().apply_chat_template(
        CONVERSATION, add_generation_prompt=True, return_dict=False
    )
    assert local[0]["prompt_token_ids"] == remote[0]["prompt_token_ids"] == want


def test_chat_messages_without_a_chat_template_are_a_clear_line_error(tmp_path: Path, capsys) -> None:
    model = save_model(tmp_path / "model")
    src = write_lines(tmp_path / "in.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}, LINES[0]])
    code, records = run_generate(tmp_path, src, "--model", str(model))
    assert code == 1 and [r["line"] for r in records] == [2]
    assert "line 1: messages: the tokenizer has no chat template" in capsys.readouterr().err


def test_generate_without_model_uses_the_embedded_default_model(tmp_path: Path) -> None:
    src = write_lines(tmp_path / "in.jsonl", [{"prompt": "1+2="}])
    code, records = run_generate(tmp_path, src, "--temperature", "0", "--max-tokens", "8")
    assert code == 0 and len(records) == 1
    sample = records[0]["samples"][0]
    assert sample["finish_reason"] == "stop" and sample["text"] == "3"  # the addition model, greedy


def test_a_stop_string_in_a_lines_sampling_params_stops_it_and_is_reported(tmp_path: Path) -> None:
    lines = [{"prompt": "20+26=", "sampling_params": {"stop": ["6"], "include_stop_str_in_output": True}}]
    code, records = run_generate(tmp_path, write_lines(tmp_path / "in.jsonl", lines), "--temperature", "0")
    sample = records[0]["samples"][0]
    assert code == 0 and (sample["text"], sample["finish_reason"], sample["stop_reason"]) == (
        "56",
        "stop",
        "6",
    )


def test_stop_flags_apply_to_every_line_and_a_lines_own_stop_overrides_them(tmp_path: Path) -> None:
    lines = [{"prompt": "20+26="}, {"prompt": "20+26=", "sampling_params": {"stop": []}}]
    flags = ("--stop", "6", "--include-stop-str-in-output", "--min-tokens", "1")
    code, records = run_generate(tmp_path, write_lines(tmp_path / "in.jsonl", lines), *flags)
    flagged, overridden = (r["samples"][0] for r in records)
    assert code == 0 and (flagged["text"], flagged["stop_reason"]) == ("56", "6")
    assert (overridden["text"], overridden["finish_reason"], overridden["stop_reason"]) == (
        "56",
        "stop",
        None,
    )


@pytest.mark.parametrize("model_type", HYBRIDS)
def test_generate_against_a_hybrid_server_matches_in_process(tmp_path: Path, model_type: str) -> None:
    """Nemotron-H (Mamba2, MoE, attention) and Mamba-2 (no attention; it declares no context length, so
    both sides are given one)."""
    model = save_hybrid(tmp_path / model_type, model_type, char_tokenizer())
    src = write_lines(tmp_path / "in.jsonl", [LINES[0], LINES[1], LINES[4]])
    length = ["--max-model-len", str(MAX_MODEL_LEN)]
    _, local = run_generate(tmp_path, src, "--model", str(model), *length)
    with serving(load_engine(model, EngineConfig(max_model_len=MAX_MODEL_LEN))) as server:
        code, remote = run_generate(tmp_path, src, "--server", server.address)
    assert code == 0 and len(remote) == 3 and len(remote[2]["samples"]) == 2
    strip = [{k: v for k, v in r.items() if k != "request_id"} for r in local]
    assert [{k: v for k, v in r.items() if k != "request_id"} for r in remote] == strip
