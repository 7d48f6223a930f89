"""The layout docs/architecture.md promises, checked on the sources: the engine core a dozen files, no import
circle, no arrow from a sub-package back up into the loop files above it, no hand-written file over 400 lines
(the product, tests, benchmarks, scripts and examples).

Each rule's checker is also shown a broken layout, so that a pass means something.
"""

from __future__ import annotations

from pathlib import Path

from tests.import_graph import ROOT, arrows_back_up, import_circles, import_graph, product_sources

ENGINE_TOP_FILES = 12  # the loop's own files at the top of rollout/engine/ (__init__.py included)
LONGEST_FILE = 400  # lines
LAYERED = ("rollout.engine", "rollout.openai", "rollout.server", "rollout.client")


def top_level_files(package_dir: Path) -> list[str]:
    return sorted(p.name for p in package_dir.glob("*.py"))


def long_files(paths: list[Path], limit: int = LONGEST_FILE) -> list[tuple[str, int]]:
    return [(p.as_posix(), n) for p in paths if (n := len(p.read_text().splitlines())) > limit]


def test_the_engine_core_is_a_dozen_files() -> None:
    files = top_level_files(ROOT / "rollout" / "engine")
    assert len(files) <= ENGINE_TOP_FILES, f"rollout/engine/ has {len(files)} top-level files: {files}"


def test_no_import_circle() -> None:
    assert import_circles(import_graph()) == []


def test_no_arrow_back_up_into_a_package_top() -> None:
    graph = import_graph()
    assert {package: arrows_back_up(graph, package) for package in LAYERED} == {p: [] for p in LAYERED}


def hand_written_sources() -> list[Path]:
    """The product's files (generated stubs left out) and every test, benchmark, script and example."""
    around = [p for d in ("tests", "benchmarks", "scripts", "examples") for p in (ROOT / d).rglob("*.py")]
    return product_sources() + sorted(around)


def test_no_hand_written_file_over_400_lines() -> None:
    assert long_files(hand_written_sources()) == []


def test_the_checkers_report_a_broken_layout(tmp_path: Path) -> None:
    graph = {
        "p.a": {"p.b"},
        "p.b": {"p.a"},  # a circle
        "p.sub.x": {"p.a"},  # p.sub is a package (it has p.sub.x): an arrow back up into p's top
        "p.c": set(),
    }
    assert import_circles(graph) == [["p.a", "p.b"]]
    assert arrows_back_up(graph, "p") == [("p.sub.x", "p.a")]
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (LONGEST_FILE + 1))
    short = tmp_path / "short.py"
    short.write_text("x = 1\n" * LONGEST_FILE)
    assert long_files([long, short]) == [(long.as_posix(), LONGEST_FILE + 1)]
