// The counter-based noise's uniform (rollout/engine/sampling_noise.py): SplitMix64's finalizer, top 53
// bits, to fp32 v in (0, 1) exactly as the torch ops there compute it. Inline: loops over it vectorize.

#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace rollout_noise {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;  // SplitMix64's increment

// x < 2**53 to fp32, rounded once to nearest as int64 -> fp32 is: through the exact double, built from
// two 32-bit halves with the 2**52 exponent trick (loops vectorize without AVX-512's int64 conversions).
inline float to_float53(uint64_t x) {
  const uint64_t hi = (x >> 32) | 0x4330000000000000ull, lo = (x & 0xffffffffull) | 0x4330000000000000ull;
  double dhi, dlo;
  std::memcpy(&dhi, &hi, sizeof(dhi));
  std::memcpy(&dlo, &lo, sizeof(dlo));
  return static_cast<float>((dhi - 0x1p52) * 0x1p32 + (dlo - 0x1p52));
}

inline float uniform(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float v = to_float53(z >> 11) * 0x1p-53f + 0x1p-54f;
  return std::min(v, 1.0f - 0x1p-24f);  // fp32 rounds the top of the range to 1
}

}  // namespace rollout_noise
