#!/usr/bin/env bash
# Fills .whl/ (ignored) with every wheel the GPU suite needs beyond the lent image (Python 3.12, manylinux
# x86-64): the lent machine cannot download. The image has torch 2.11, triton, grpcio, protobuf,
# safetensors, pytest, pytest-xdist, hypothesis, peft, transformers 5.17; we carry the versions this
# repository is tested with where they differ, and what it lacks. One version of each: two stop the install.
# transformers 5.24 accepts the image's huggingface_hub 1.33 and tokenizers 0.23.2, so those stay.
# A wheel already in .whl/ is not downloaded again; another version of it is removed. Ends by checking that
# the wheels and the tracked files stay well under the 64 MiB a device call carries.
# Usage: scripts/gpu_wheels.sh   (then carry .whl in every device run; docs/gpu_suite.md)
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(
  grpcio==1.85.3                    # the generated stubs need grpcio >= 1.85.1
  grpcio-health-checking==1.85.1    # not in the image
  grpcio-reflection==1.85.1         # not in the image
  protobuf==7.36.2                  # the generated stubs' gencode version
  transformers==5.24.0              # the version the engine's bridge is tested with (image: 5.17)
  regex==2025.11.3                  # transformers 5.24 needs regex >= 2025.10.22
  peft==0.21.2                      # phase l's adapter push: the version tested here, whatever the image's
)
LIMIT_MIB=48  # of the 64 MiB a call may carry: room for what the repository grows by
PLATFORMS=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
           manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "$tag")
done
mkdir -p .whl
missing=()
for spec in "${WHEELS[@]}"; do
  name="${spec%%==*}"; version="${spec##*==}"; stem="${name//-/_}"
  for stale in .whl/"$stem"-*.whl; do  # another version of the same package
    [ -e "$stale" ] && [[ "$stale" != .whl/"$stem-$version"-* ]] && rm -v "$stale"
  done
  compgen -G ".whl/$stem-$version-*.whl" >/dev/null || missing+=("$spec")
done
if [ ${#missing[@]} -gt 0 ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" -d .whl "${missing[@]}"
else
  echo "gpu_wheels.sh: every wheel already in .whl/, nothing downloaded"
fi
ls .whl
wheels=$(du -cb .whl/*.whl | tail -1 | cut -f1)
tracked=$(git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
total_mib=$(( (wheels + tracked) / 1048576 ))
echo "gpu_wheels.sh: wheels $(( wheels / 1048576 )) MiB + tracked files $(( tracked / 1048576 )) MiB = $total_mib MiB of 64"
[ "$total_mib" -le "$LIMIT_MIB" ] || { echo "gpu_wheels.sh: over $LIMIT_MIB MiB: the call would come close to 64" >&2; exit 1; }
