"""`rollout serve --token ''` is refused in one line, exit 2, before the model loads: it served both front
ends with no auth at all."""

from __future__ import annotations

import pytest

from rollout import engine_factory
from rollout.cli import main


@pytest.mark.parametrize("token", ["", "  "])
def test_an_empty_token_is_a_usage_error_naming_the_flag(token: str, capsys, monkeypatch) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the model loaded before the check")

    monkeypatch.setattr(engine_factory, "load_engine", refuse)
    assert main(["serve", "--port", "0", "--openai-port", "0", "--token", token]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--token: empty" in err[0], err
