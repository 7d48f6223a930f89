// The uniforms of the counter-based sampling noise (rollout/engine/sampling_noise.py) in one pass:
// SplitMix64 outputs 1..V of each row's stream, top 53 bits, to fp32 v in (0, 1) exactly as the torch
// ops there compute it (same integer bits, same IEEE conversions), without their ten passes over
// [rows, vocab] int64 temporaries.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include "noise_uniform.h"

using rollout_noise::kGamma;
using rollout_noise::uniform;

// out [R, V] fp32 <- v(r, t) for the stream state states[r] (int64, the uint64 state's bits).
void uniform_noise(torch::Tensor out, torch::Tensor states) {
  TORCH_CHECK(out.dtype() == torch::kFloat32 && out.is_contiguous() && out.dim() == 2,
              "uniform_noise: contiguous [rows, vocab] fp32 output expected");
  TORCH_CHECK(states.dtype() == torch::kInt64 && states.is_contiguous() && states.size(0) == out.size(0),
              "uniform_noise: one int64 state per row expected");
  const int64_t rows = out.size(0), vocab = out.size(1);
  const uint64_t* state = reinterpret_cast<const uint64_t*>(states.data_ptr<int64_t>());
  float* o = out.data_ptr<float>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = o + r * vocab;
      const uint64_t base = state[r];
#pragma omp simd
      for (int64_t t = 0; t < vocab; ++t) row[t] = uniform(base + static_cast<uint64_t>(t + 1) * kGamma);
    }
  });
}
