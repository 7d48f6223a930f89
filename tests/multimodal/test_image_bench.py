"""`rollout bench --model <image-text model>` reports images/s and tokens/s for rollout and `generate`."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.bench.command import main
from tests.multimodal.vlm_builders import llava_processor, tiny_llava


def test_bench_of_a_vlm_reports_images_per_second(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    tiny_llava().save_pretrained(tmp_path)
    llava_processor().save_pretrained(tmp_path)
    argv = ["--model", str(tmp_path), "--prompts", "2", "--n", "2", "--new", "4", "--repeats", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for system in ("rollout", "generate"):
        line = next(line for line in out.splitlines() if line.strip().startswith(f"{system}:"))
        assert "images/s" in line and "tokens/s" in line
