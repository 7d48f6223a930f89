"""The checked-in stubs are exactly what scripts/gen_proto.py produces from the protos."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _gen_proto():
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_stubs_match_the_protos_byte_for_byte(tmp_path: Path) -> None:
    fresh = {p.name: p.read_bytes() for p in _gen_proto().generate(tmp_path)}
    checked_in = {
        p.name: p.read_bytes() for p in (ROOT / "rollout" / "protocol" / "generated").iterdir() if p.is_file()
    }
    assert sorted(fresh) == sorted(checked_in)
    stale = [name for name, data in fresh.items() if checked_in[name] != data]
    assert not stale, f"stale stubs {stale}: run python scripts/gen_proto.py"


def test_generated_stubs_use_package_relative_imports() -> None:
    for path in (ROOT / "rollout" / "protocol" / "generated").glob("*.py"):
        assert "from rollout.v1 import" not in path.read_text(), path.name
