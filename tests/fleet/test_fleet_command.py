"""`rollout fleet serve` refuses bad flags at once, before Ray or a model loads."""

from __future__ import annotations

import pytest

from rollout.cli import main


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["fleet", "serve", "--replicas", "0"], "--replicas"),
        (["fleet", "serve", "--replicas", "2", "--port", "70000"], "--port"),
        (["fleet", "serve", "--replicas", "2", "--num-blocks", "-3"], "--num-blocks"),
        (["fleet", "serve"], "--replicas"),
    ],
)
def test_a_bad_fleet_flag_is_refused_naming_it(argv: list[str], named: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        code = main(argv)
        raise SystemExit(code)
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err
