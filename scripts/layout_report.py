"""The package layout in numbers: files per package, the longest files, import circles and arrows back up.

Run from the repository root: `python scripts/layout_report.py` (reads the sources; imports nothing of them).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.import_graph import ROOT, arrows_back_up, import_circles, import_graph, product_sources  # noqa: E402


def main() -> None:
    files = product_sources()
    per_package = Counter(p.parent.relative_to(ROOT).as_posix() for p in files)
    print("files per package (hand-written .py, __init__ included):")
    for package, count in sorted(per_package.items()):
        print(f"  {count:3d}  {package}/")
    lines = sorted(
        ((len(p.read_text().splitlines()), p.relative_to(ROOT).as_posix()) for p in files), reverse=True
    )
    print(f"\n{len(files)} files, {sum(n for n, _ in lines)} lines; the longest:")
    for n, path in lines[:12]:
        print(f"  {n:4d}  {path}")
    graph = import_graph()
    circles = import_circles(graph)
    print(f"\nimport circles: {len(circles)}")
    for circle in circles:
        print("  " + " <-> ".join(circle))
    for package in ("rollout.engine", "rollout.openai", "rollout.server", "rollout.client"):
        arrows = arrows_back_up(graph, package)
        print(f"\narrows back up inside {package}: {len(arrows)}")
        for mod, target in arrows:
            print(f"  {mod} -> {target}")


if __name__ == "__main__":
    main()
