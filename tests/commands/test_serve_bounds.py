"""`rollout serve`'s bounds on grammar compiles are checked before the model loads (exit 2, one line)."""

from __future__ import annotations

import pytest

from rollout import engine_factory
from rollout.cli import main


@pytest.mark.parametrize(
    "flags", [["--structured-compile-timeout", "0"], ["--structured-compile-workers", "0"]]
)
def test_a_compile_bound_that_admits_nothing_is_a_usage_error(flags: list[str], capsys, monkeypatch) -> None:
    monkeypatch.setattr(engine_factory, "load_engine", lambda *a, **k: pytest.fail("the model loaded"))
    assert main(["serve", "--port", "0", *flags]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        "rollout serve: error: --structured-compile-timeout / --structured-compile-workers"
    )
