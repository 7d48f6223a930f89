"""Regenerates the gRPC stubs in rollout/protocol/generated/ from every .proto in proto/rollout/v1/.

protoc writes absolute imports (`from rollout.v1 import rollout_pb2`) that follow the proto path;
the stubs live in a flat package instead, so the one post-step below rewrites those lines to
package-relative imports (`from . import rollout_pb2`). The files are otherwise untouched, and
tests/server/test_generated_stubs.py proves they match the protos byte for byte.

Usage: python scripts/gen_proto.py [--out DIR]
"""

from __future__ import annotations

import argparse
import importlib.resources
import re
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTO_PACKAGE = Path("rollout") / "v1"
DEFAULT_OUT = ROOT / "rollout" / "protocol" / "generated"
_ABSOLUTE_IMPORT = re.compile(r"^from rollout\.v1 import ", flags=re.MULTILINE)
_INIT = '"""Generated gRPC stubs (scripts/gen_proto.py); never edit by hand."""\n'


def proto_files() -> list[Path]:
    """Every .proto of the package, relative to the proto root, in a stable order."""
    return sorted(p.relative_to(PROTO_ROOT) for p in (PROTO_ROOT / PROTO_PACKAGE).glob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Compiles every proto into `out_dir` (flat, relative imports); returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        _run_protoc(Path(tmp))
        written = [_relocate(path, out_dir) for path in sorted((Path(tmp) / PROTO_PACKAGE).iterdir())]
    init = out_dir / "__init__.py"
    init.write_text(_INIT)
    return [init, *written]


def _run_protoc(out: Path) -> None:
    include = str(importlib.resources.files("grpc_tools") / "_proto")
    args = ["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out}"]
    args += [f"--pyi_out={out}", f"--grpc_python_out={out}", *map(str, proto_files())]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed: {' '.join(args)}")


def _relocate(path: Path, out_dir: Path) -> Path:
    """The documented post-step: absolute `rollout.v1` imports become package-relative."""
    target = out_dir / path.name
    target.write_text(_ABSOLUTE_IMPORT.sub("from . import ", path.read_text()))
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
