#!/usr/bin/env bash
# The GPU proof for a 15-minute lease (docs/gpu_suite.md): call 1 = phases a (environment), b (gpu and
# Triton tests), c (parity), h (hybrid state budget and snapshots), l (LoRA push) in <= 330 s; call 2 =
# d1 (GRPO shape), d2 (decode floor), e (weight updates) in <= 215 s. Every phase runs in its own process
# under a time box (benchmarks/gpu_suite/plan.py) and writes $OUT/phase_<x>.json (./out when unset) even
# when the box is reached; then $OUT/benchmarks_section.md is assembled; the log goes to $OUT/suite.log.
# Usage: scripts/gpu_suite.sh [--cpu-dry-run] [--call 1|2 | [--seconds N] PHASE ...]   (default: call 1, then 2)
#        --seconds: the time box of a rerun of chosen phases (default: their reservations in plan.py)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./out}"
DRY=()
CALLS=()
PHASES=()
SECONDS_ARG=()
want=""
for arg in "$@"; do
  if [ "$want" = call ]; then
    case "$arg" in 1|2) CALLS+=("$arg") ;; *) echo "gpu_suite.sh: --call takes 1 or 2, not '$arg'" >&2; exit 2 ;; esac
    want=""
    continue
  elif [ "$want" = seconds ]; then
    [[ "$arg" =~ ^[0-9]+$ ]] || { echo "gpu_suite.sh: --seconds takes whole seconds, not '$arg'" >&2; exit 2; }
    SECONDS_ARG=(--seconds "$arg")
    want=""
    continue
  fi
  case "$arg" in
    --cpu-dry-run) DRY=(--dry-run) ;;
    --call) want=call ;;
    --seconds) want=seconds ;;
    a|b|c|h|l|d1|d2|e|s) PHASES+=("$arg") ;;
    d) PHASES+=(d1 d2) ;;
    *) echo "gpu_suite.sh: unknown argument '$arg' (phases: a b c h l d d1 d2 e s; --call 1|2; --seconds N; --cpu-dry-run)" >&2; exit 2 ;;
  esac
done
[ -n "$want" ] && { echo "gpu_suite.sh: --$want takes a value" >&2; exit 2; }
[ ${#SECONDS_ARG[@]} -gt 0 ] && [ ${#PHASES[@]} -eq 0 ] && { echo "gpu_suite.sh: --seconds goes with phases" >&2; exit 2; }
[ ${#CALLS[@]} -gt 0 ] && [ ${#PHASES[@]} -gt 0 ] && { echo "gpu_suite.sh: --call or phases, not both" >&2; exit 2; }
[ ${#CALLS[@]} -eq 0 ] && [ ${#PHASES[@]} -eq 0 ] && CALLS=(1 2)
mkdir -p "$OUT"

suite() {
  if [ ${#DRY[@]} -eq 0 ] && compgen -G ".whl/*.whl" >/dev/null; then
    # the lent machine cannot download: the wheels scripts/gpu_wheels.sh fetched travel with `carry`;
    # a second call on the same (warm) machine finds them installed and skips the ~10 s
    digest="$(du -b .whl/*.whl | sha1sum | cut -c1-16)"  # names and sizes: a copy's mtimes differ
    if [ "$(cat /tmp/site/.wheels 2>/dev/null)" != "$digest" ]; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "gpu_suite.sh: installing .whl/ failed" >&2; return 1; }
      echo "$digest" > /tmp/site/.wheels
    fi
    export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
  fi
  if [ ${#DRY[@]} -eq 1 ]; then
    export CUDA_VISIBLE_DEVICES=""
  else
    export ROLLOUT_CPU_KERNELS=0  # the engine runs on CUDA: no minute spent compiling the CPU kernels
  fi
  export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
  status=0
  if [ ${#PHASES[@]} -gt 0 ]; then
    python3 -m benchmarks.gpu_suite.main --phases "${PHASES[@]}" --out "$OUT" "${SECONDS_ARG[@]}" "${DRY[@]}" || status=1
  fi
  for call in "${CALLS[@]}"; do
    python3 -m benchmarks.gpu_suite.main --call "$call" --out "$OUT" "${DRY[@]}" || status=1
  done
  python3 -m benchmarks.gpu_suite.main --assemble --out "$OUT" >/dev/null
  echo "gpu_suite.sh: exit $status; reports in $OUT"
  return $status
}

suite 2>&1 | tee -a "$OUT/suite.log"
exit "${PIPESTATUS[0]}"
