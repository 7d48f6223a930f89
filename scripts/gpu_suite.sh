#!/usr/bin/env bash
# The whole GPU proof in one command (issue 34; docs/gpu_suite.md): phases a (environment), b (gpu and
# Triton tests), c (parity), d1/d2 (speed), e (weight updates), each within one device call (<= 9 min),
# each writing phase_<x>.json + .md to $OUT (./out when unset); then the docs/benchmarks.md section is
# assembled into $OUT/benchmarks_section.md.
# Usage: scripts/gpu_suite.sh [--cpu-dry-run] [PHASE ...]     (default: every phase)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./out}"
DRY=()
PHASES=()
for arg in "$@"; do
  case "$arg" in
    --cpu-dry-run) DRY=(--dry-run) ;;
    a|b|c|d1|d2|e) PHASES+=("$arg") ;;
    d) PHASES+=(d1 d2) ;;
    *) echo "gpu_suite.sh: unknown argument '$arg' (phases: a b c d d1 d2 e; --cpu-dry-run)" >&2; exit 2 ;;
  esac
done
[ ${#PHASES[@]} -eq 0 ] && PHASES=(a b c d1 d2 e)
mkdir -p "$OUT"
if [ ${#DRY[@]} -eq 0 ] && compgen -G ".whl/*.whl" >/dev/null; then
  # the lent machine cannot download: the wheels scripts/gpu_wheels.sh fetched travel with `carry`
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_suite.sh: installing .whl/ failed" >&2; exit 1; }
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
if [ ${#DRY[@]} -eq 1 ]; then export CUDA_VISIBLE_DEVICES=""; fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
status=0
for phase in "${PHASES[@]}"; do
  python3 -m benchmarks.gpu_suite.main --phase "$phase" --out "$OUT" "${DRY[@]}" || status=1
done
python3 -m benchmarks.gpu_suite.main --assemble --out "$OUT"
exit $status
