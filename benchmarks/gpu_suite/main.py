"""The GPU suite's entry point; scripts/gpu_suite.sh calls it (docs/gpu_suite.md).

    python -m benchmarks.gpu_suite.main --call 1 [--dry-run] [--out DIR]      # a device call's phases, time-boxed
    python -m benchmarks.gpu_suite.main --phases c h [--seconds S]            # chosen phases, time-boxed
    python -m benchmarks.gpu_suite.main --phase c [--seconds S] [--dry-run]   # one phase, in this process
    python -m benchmarks.gpu_suite.main --assemble [--out DIR] [--into docs/benchmarks.md]

Exit status 1 when a phase failed its checks (its report is written either way).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from pathlib import Path

from benchmarks.gpu_suite.orchestrate import run_call
from benchmarks.gpu_suite.plan import CALLS, GRACE, PHASES
from benchmarks.gpu_suite.report import Context, assemble, splice_into, write_phase


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--phase", choices=list(PHASES), help="run one phase in this process")
    what.add_argument("--phases", nargs="+", choices=list(PHASES), help="run these phases, one process each")
    what.add_argument("--call", type=int, choices=sorted(CALLS), help="run a device call's phases (plan.py)")
    what.add_argument("--assemble", action="store_true", help="join the reports into the docs section")
    parser.add_argument("--seconds", type=float, help="time box (default: the plan's reservations)")
    parser.add_argument("--grace", type=float, default=GRACE, help="seconds past a box before a kill")
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny shapes on CPU: the code paths, no figures"
    )
    parser.add_argument("--out", default=os.environ.get("OUT") or "out")
    parser.add_argument("--into", help="with --assemble: splice the section into this markdown file")
    args = parser.parse_args()
    out = Path(args.out)
    if args.assemble:
        section = assemble(out)
        if args.into:
            splice_into(Path(args.into), section)
        return 0
    if args.phase is not None:
        seconds = PHASES[args.phase].seconds - args.grace if args.seconds is None else args.seconds
        return run_phase(args.phase, Context(out, args.dry_run, time.monotonic() + seconds, args.phase))
    names = list(CALLS[args.call]) if args.call is not None else args.phases
    return run_call(names, out, args.dry_run, args.seconds, args.grace)


def run_phase(name: str, ctx: Context) -> int:
    module = importlib.import_module(f"benchmarks.gpu_suite.{PHASES[name].module}")
    box, start = ctx.seconds_left(), time.perf_counter()
    try:
        data, markdown = module.run(ctx)
        bad = module.failed(data)
    except Exception as err:  # the phase's report says what broke, so the next call can fix it
        data, markdown, bad = {"error": traceback.format_exc()}, f"FAILED: {type(err).__name__}: {err}", True
    data["seconds"] = round(time.perf_counter() - start, 1)
    data["time_box"] = round(box, 1)
    note = f"{data['seconds']} s of a {data['time_box']} s box{', FAILED' if bad else ''}"
    write_phase(ctx, name, data, markdown + f"\n\n({note})")
    print(f"phase {name}: {'FAILED' if bad else 'ok'} in {data['seconds']} s\n{markdown}", flush=True)
    if "error" in data:
        print(data["error"], file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
