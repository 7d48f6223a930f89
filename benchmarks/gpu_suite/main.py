"""Runs one phase of the GPU suite (or assembles the docs section); scripts/gpu_suite.sh calls it per phase.

    python -m benchmarks.gpu_suite.main --phase c [--dry-run] [--out DIR]
    python -m benchmarks.gpu_suite.main --assemble [--out DIR] [--into docs/benchmarks.md]

Exit status 1 when the phase failed its checks (its JSON and markdown are written either way).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from pathlib import Path

from benchmarks.gpu_suite.report import Context, assemble, splice_into, write_phase

PHASES = {
    "a": "phase_env",
    "b": "phase_tests",
    "c": "phase_parity",
    "d1": "phase_speed_grpo",
    "d2": "phase_speed_decode",
    "e": "phase_weights",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=sorted(PHASES))
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny shapes on CPU: the code paths, no figures"
    )
    parser.add_argument("--out", default=os.environ.get("OUT") or "out")
    parser.add_argument("--assemble", action="store_true")
    parser.add_argument("--into", help="with --assemble: splice the section into this markdown file")
    args = parser.parse_args()
    out = Path(args.out)
    if args.assemble:
        section = assemble(out)
        if args.into:
            splice_into(Path(args.into), section)
        return 0
    if args.phase is None:
        parser.error("--phase or --assemble is required")
    return run_phase(args.phase, Context(out, args.dry_run))


def run_phase(name: str, ctx: Context) -> int:
    module = importlib.import_module(f"benchmarks.gpu_suite.{PHASES[name]}")
    start = time.perf_counter()
    try:
        data, markdown = module.run(ctx)
        bad = module.failed(data)
    except Exception as err:  # the phase's report says what broke, so the next call can fix it
        data, markdown, bad = {"error": traceback.format_exc()}, f"FAILED: {type(err).__name__}: {err}", True
    data["seconds"] = round(time.perf_counter() - start, 1)
    write_phase(ctx, name, data, markdown + f"\n\n({data['seconds']} s{', FAILED' if bad else ''})")
    print(f"phase {name}: {'FAILED' if bad else 'ok'} in {data['seconds']} s\n{markdown}", flush=True)
    if "error" in data:
        print(data["error"], file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
