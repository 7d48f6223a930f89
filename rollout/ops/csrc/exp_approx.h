// exp in a form compilers vectorize (std::exp is a scalar call): Cody-Waite range reduction and
// Cephes' degree-6 polynomial, within 2 ulp of expf where expf is a normal float; NaN propagates.
// Shared by the decode kernel's softmax and the fused SiLU.

#pragma once

#include <cstdint>

namespace rollout_math {

inline float exp_approx(float x) {
  // Below -86.6 the result is e^-86.6 (2e-38, the smallest this form keeps normal; expf goes denormal
  // from -87.3); above 88.72 it overflows to inf as expf does. A NaN passes through both clamps.
  x = x < -86.6f ? -86.6f : (x > 89.f ? 89.f : x);
  // k = floor(x / ln 2 + 0.5) by truncation and an integer correction (std::floor would keep GCC
  // from vectorizing the loop)
  const float t = x * 1.44269504088896341f + 0.5f;
  const int32_t truncated = static_cast<int32_t>(t);
  const int32_t k = truncated - (static_cast<float>(truncated) > t);
  const float n = static_cast<float>(k);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // p * 2^k as p * 2^(k-1) * 2: 2^128 has no float, while the product may (or overflows exactly as
  // expf does); bit_cast, as memcpy would keep the loop scalar
  return p * __builtin_bit_cast(float, (k + 126) << 23) * 2.f;
}

}  // namespace rollout_math
