// Fused CPU kernels for the per-token work around the matmuls of a decode step (rollout/ops/
// fused_modules.py, paged_attention_sdpa.py): RMSNorm and the gated MLP's SiLU-and-multiply, one
// pass each where transformers runs eight and two eager ops, and the KV cache write, one copy per
// token and head where index_copy_ costs a dispatch per tensor; the rotary embedding, one pass where
// transformers runs ten ops. fp32, contiguous rows.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstring>

#include "exp_approx.h"

namespace {

constexpr int64_t kGrainElements = 16384;  // below this a loop runs on one thread

void check_fp32_contiguous(const torch::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.dtype() == torch::kFloat32 && t.is_contiguous() && t.device().is_cpu(), op, ": ", name,
              " must be a contiguous fp32 CPU tensor");
}

}  // namespace

// weight * (x * rsqrt(mean(x^2) + eps)) over the last dimension, as transformers' Llama-family RMSNorm
// computes it in fp32 (the sum of squares reduced in a different order: within float rounding).
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
  check_fp32_contiguous(x, "rms_norm", "x");
  check_fp32_contiguous(weight, "rms_norm", "weight");
  const int64_t h = x.size(-1);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == h, "rms_norm: weight must be [", h, "]");
  auto out = torch::empty_like(x);
  const int64_t rows = h == 0 ? 0 : x.numel() / h;
  const float* xs = x.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const float e = static_cast<float>(eps);
  at::parallel_for(0, rows, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(h, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = xs + r * h;
      float* dst = o + r * h;
      float squares = 0.f;
#pragma omp simd reduction(+ : squares)
      for (int64_t i = 0; i < h; ++i) squares += row[i] * row[i];
      const float inv = 1.f / std::sqrt(squares / static_cast<float>(h) + e);
#pragma omp simd
      for (int64_t i = 0; i < h; ++i) dst[i] = w[i] * (row[i] * inv);
    }
  });
  return out;
}

// silu(gate) * up, silu(x) = x / (1 + exp(-x)) as torch computes it (exp within 2 ulp of expf).
torch::Tensor silu_mul(torch::Tensor gate, torch::Tensor up) {
  check_fp32_contiguous(gate, "silu_mul", "gate");
  check_fp32_contiguous(up, "silu_mul", "up");
  TORCH_CHECK(gate.sizes() == up.sizes(), "silu_mul: gate and up must have one shape");
  auto out = torch::empty_like(gate);
  const float* g = gate.data_ptr<float>();
  const float* u = up.data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, gate.numel(), kGrainElements, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) o[i] = g[i] / (1.f + rollout_math::exp_approx(-g[i])) * u[i];
  });
  return out;
}

// key_cache/value_cache [num_blocks, block_size, kv_heads, D] (contiguous) at each token's slot <-
// key/value [T, kv_heads, D] (any token and head strides, contiguous rows); slots [T] int64.
void write_kv(torch::Tensor key_cache, torch::Tensor value_cache, torch::Tensor key, torch::Tensor value,
              torch::Tensor slots) {
  check_fp32_contiguous(key_cache, "write_kv", "key_cache");
  check_fp32_contiguous(value_cache, "write_kv", "value_cache");
  TORCH_CHECK(slots.dtype() == torch::kInt64 && slots.dim() == 1 && slots.is_contiguous(),
              "write_kv: slots must be a contiguous int64 vector");
  const int64_t tokens = slots.size(0), num_slots = key_cache.size(0) * key_cache.size(1);
  const int64_t* slot = slots.data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t)
    TORCH_CHECK(slot[t] >= 0 && slot[t] < num_slots, "write_kv: slot ", slot[t], " outside the cache's ",
                num_slots);
  for (auto pair : {std::make_pair(&key, &key_cache), std::make_pair(&value, &value_cache)}) {
    const torch::Tensor& src = *pair.first;
    const torch::Tensor& cache = *pair.second;
    TORCH_CHECK(src.dtype() == torch::kFloat32 && src.dim() == 3 && src.size(0) == tokens &&
                    src.size(1) == cache.size(2) && src.size(2) == cache.size(3) && src.stride(2) == 1,
                "write_kv: key/value must be fp32 [tokens, kv_heads, head_dim] with contiguous rows");
    const int64_t heads = src.size(1), d = src.size(2);
    const float* s = src.data_ptr<float>();
    float* c = cache.data_ptr<float>();
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < heads; ++h)
        std::memcpy(c + (slot[t] * heads + h) * d, s + t * src.stride(0) + h * src.stride(1), d * sizeof(float));
  }
}

// x * cos + rotate_half(x) * sin for x [T, heads, D] (contiguous rows of D), cos/sin [T, D]: the rotary
// embedding of transformers' Llama-family attention, rotate_half(x) = cat(-x[D/2:], x[:D/2]). The two
// products are rounded before the sum, as the torch ops do (the build turns FMA contraction off).
torch::Tensor rotary(torch::Tensor x, torch::Tensor cos, torch::Tensor sin) {
  TORCH_CHECK(x.dtype() == torch::kFloat32 && x.dim() == 3 && x.stride(2) == 1 && x.device().is_cpu(),
              "rotary: x must be fp32 [tokens, heads, head_dim] with contiguous rows");
  check_fp32_contiguous(cos, "rotary", "cos");
  check_fp32_contiguous(sin, "rotary", "sin");
  const int64_t tokens = x.size(0), heads = x.size(1), d = x.size(2), half = d / 2;
  TORCH_CHECK(d % 2 == 0 && cos.dim() == 2 && cos.size(0) == tokens && cos.size(1) == d && sin.sizes() == cos.sizes(),
              "rotary: cos and sin must be [tokens, head_dim] with an even head_dim");
  auto out = torch::empty({tokens, heads, d}, x.options());
  const float* xs = x.data_ptr<float>();
  const float* c = cos.data_ptr<float>();
  const float* s = sin.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t st = x.stride(0), sh = x.stride(1);
  at::parallel_for(0, tokens * heads, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(d, 1)),
                   [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / heads, h = item % heads;
      const float* row = xs + t * st + h * sh;
      const float* ct = c + t * d;
      const float* sn = s + t * d;
      float* dst = o + item * d;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) dst[i] = row[i] * ct[i] + -row[i + half] * sn[i];
#pragma omp simd
      for (int64_t i = half; i < d; ++i) dst[i] = row[i] * ct[i] + row[i - half] * sn[i];
    }
  });
  return out;
}
