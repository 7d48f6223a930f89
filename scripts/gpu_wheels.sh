#!/usr/bin/env bash
# Downloads into .whl/ (ignored) every wheel the GPU suite needs beyond the lent image (Python 3.12,
# manylinux x86-64): the lent machine cannot download. The image has torch 2.11, triton, grpcio,
# protobuf, safetensors, pytest, hypothesis, transformers 5.17; we carry the versions this repository
# is tested with where they differ, and what it lacks. One version of each: two stop the install.
# transformers 5.24 accepts the image's huggingface_hub 1.33 and tokenizers 0.23.2, so those stay.
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
)
PLATFORMS=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
           manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "$tag")
done
rm -rf .whl && mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d .whl "${WHEELS[@]}"
du -ch .whl/*.whl | tail -1
ls .whl
