// The exponential race of the sampler (rollout/engine/sampler.py) in one pass per row: for every token t
// of row r, score = logprobs[r, t] - log(-log1p(-v(r, t))) with v the counter-based uniform of
// sampling_noise_cpu.cpp, and the row's token is the first argmax (a NaN wins, as torch's argmax).
//
// Bit for bit the torch ops' result: log1p through Sleef (what torch's vectorized log1p calls) and log
// through MKL's vmsLn in high-accuracy mode (what torch's log calls in MKL builds), both looked up at
// run time. Where either is missing the kernel says so (race_available) and the torch ops serve;
// engine/exponential_race.py also compares the two paths once before trusting the kernel.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <dlfcn.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "noise_uniform.h"

#if defined(__AVX__)  // built with the AVX2 / AVX512 flags (cpu_kernels.py); elsewhere the torch ops serve

namespace {

constexpr int64_t kBlock = 1024;  // tokens per pass: the block's buffer stays in L1
constexpr long long kVmlMode = 0x2 | 0x100 | 0x140000;  // VML_HA | VML_ERRMODE_IGNORE | VML_FTZDAZ_OFF

using VmsLn = void (*)(int, const float*, float*, long long);
using Log1p8 = __m256 (*)(__m256);

struct Functions {
  VmsLn ln = nullptr;
  Log1p8 log1p8 = nullptr;
};

const Functions& functions() {
  static const Functions f = [] {
    Functions found;
    found.ln = reinterpret_cast<VmsLn>(dlsym(RTLD_DEFAULT, "vmsLn"));
    found.log1p8 = reinterpret_cast<Log1p8>(dlsym(RTLD_DEFAULT, "Sleef_log1pf8_u10"));
    return found;
  }();
  return f;
}

// buf[i] <- log(-log1p(buf[i])) for buf[i] = -v: Sleef's log1p on 8 lanes (a zero-padded last vector,
// as torch's vectorized map), negated, then MKL's log, in place.
void log_exponentials_of(float* buf, int64_t n, const Functions& f) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(buf + i, _mm256_xor_ps(f.log1p8(_mm256_loadu_ps(buf + i)), sign));
  if (i < n) {
    alignas(32) float lanes[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    std::copy(buf + i, buf + n, lanes);
    _mm256_store_ps(lanes, _mm256_xor_ps(f.log1p8(_mm256_load_ps(lanes)), sign));
    std::copy(lanes, lanes + (n - i), buf + i);
  }
  f.ln(static_cast<int>(n), buf, buf, kVmlMode);
}

// buf[i] <- log E = log(-log1p(-v)) for tokens [t0, t0 + n) of the stream at `base`.
void log_exponentials(uint64_t base, int64_t t0, int64_t n, float* buf, const Functions& f) {
  const uint64_t first = base + static_cast<uint64_t>(t0 + 1) * rollout_noise::kGamma;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) buf[i] = -rollout_noise::uniform(first + static_cast<uint64_t>(i) * rollout_noise::kGamma);
  log_exponentials_of(buf, n, f);
}

struct Best {
  int64_t index = 0;
  float score = -INFINITY;
  bool nan = false;
};

// Folds scores[0, n) (token t0 + i) into `best`: torch's argmax order (the first NaN, else the first max).
void fold(const float* scores, int64_t t0, int64_t n, Best& best) {
  if (best.nan) return;
  float max = -INFINITY;
  bool any_nan = false;
#pragma omp simd reduction(max : max) reduction(|| : any_nan)
  for (int64_t i = 0; i < n; ++i) {
    max = scores[i] > max ? scores[i] : max;
    any_nan = any_nan || scores[i] != scores[i];
  }
  if (!any_nan && !(max > best.score)) return;
  for (int64_t i = 0; i < n; ++i) {
    if (any_nan ? std::isnan(scores[i]) : scores[i] == max) {
      best = Best{t0 + i, scores[i], any_nan};
      return;
    }
  }
}

// One row's winner computing every score; every score also written to `scores` when given.
int64_t race_row_full(const float* logp, uint64_t base, int64_t vocab, float* buf, float* scores,
                      const Functions& f) {
  Best best;
  for (int64_t t0 = 0; t0 < vocab; t0 += kBlock) {
    const int64_t n = std::min(kBlock, vocab - t0);
    log_exponentials(base, t0, n, buf, f);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) buf[i] = -buf[i] + logp[t0 + i];
    if (scores != nullptr) std::copy(buf, buf + n, scores + t0);
    fold(buf, t0, n, best);
  }
  return best.index;
}

// The scores of tokens ids[0, n) (exactly as race_row_full computes them) into out.
void exact_scores(const float* logp, uint64_t base, const int64_t* ids, int64_t n, float* out, const Functions& f) {
  for (int64_t i = 0; i < n; ++i) out[i] = -rollout_noise::uniform(base + static_cast<uint64_t>(ids[i] + 1) * rollout_noise::kGamma);
  log_exponentials_of(out, n, f);
  for (int64_t i = 0; i < n; ++i) out[i] = -out[i] + logp[ids[i]];
}

// An upper bound of a token's score from its uniform alone (no log): E = -log1p(-v) >= v (1 + v / 2),
// so log E >= log v + v / 3, and log v >= (e + m - 1) ln 2 for v = m 2**e, m in [1, 2) (log is concave);
// the slack covers the rounding of log1p, log and these sums (each within an ulp) with a wide margin.
inline float score_bound(float lp, float v) {
  constexpr float kLn2 = 0.693147182f;
  int32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  const float e = static_cast<float>(((bits >> 23) & 0xff) - 127);  // v is normal: 2**-54 <= v < 1
  const int32_t mantissa_bits = (bits & 0x7fffff) | 0x3f800000;
  float m;
  std::memcpy(&m, &mantissa_bits, sizeof(m));
  const float slack = 1e-3f + 1e-6f * (std::min(std::fabs(lp), 1e30f) + 40.f);  // lp = -inf stays -inf
  return lp - (e + (m - 1.f)) * kLn2 - v * (1.f / 3.f) + slack;
}

// Appends to ids every t with values[t] >= bar, in order: eight lanes per compare.
void at_least(const float* values, int64_t n, float bar, std::vector<int64_t>& ids) {
  const __m256 threshold = _mm256_set1_ps(bar);
  int64_t t = 0;
  for (; t + 8 <= n; t += 8) {
    int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(values + t), threshold, _CMP_GE_OQ));
    for (; mask != 0; mask &= mask - 1) ids.push_back(t + __builtin_ctz(mask));
  }
  for (; t < n; ++t)
    if (values[t] >= bar) ids.push_back(t);
}

// One row's winner with exact scores (logs) only for the tokens that can win: every token's bound,
// the exact score of the highest bound's token as the bar, then exact scores of the tokens whose
// bound reaches the bar; the first of the highest scores wins, as in the full pass. A row with a NaN
// or +inf takes the full pass.
int64_t race_row(const float* logp, uint64_t base, int64_t vocab, float* bounds, float* buf,
                 std::vector<int64_t>& ids, const Functions& f) {
  const uint64_t first = base + rollout_noise::kGamma;
#pragma omp simd
  for (int64_t t = 0; t < vocab; ++t) bounds[t] = rollout_noise::uniform(first + static_cast<uint64_t>(t) * rollout_noise::kGamma);
#pragma omp simd
  for (int64_t t = 0; t < vocab; ++t) bounds[t] = score_bound(logp[t], bounds[t]);
  float top = -INFINITY;
  bool unusual = false;
#pragma omp simd reduction(max : top) reduction(|| : unusual)
  for (int64_t t = 0; t < vocab; ++t) {
    top = bounds[t] > top ? bounds[t] : top;
    unusual = unusual || bounds[t] != bounds[t] || bounds[t] == INFINITY;
  }
  if (unusual) return race_row_full(logp, base, vocab, buf, nullptr, f);
  if (top == -INFINITY) return 0;  // every score is -inf: the first token, as argmax
  ids.clear();
  at_least(bounds, vocab, top, ids);
  const int64_t top_index = ids.front();
  Best best{top_index, 0.f, false};
  exact_scores(logp, base, &top_index, 1, &best.score, f);
  ids.clear();
  at_least(bounds, vocab, best.score, ids);
  buf = ids.size() <= static_cast<size_t>(kBlock) ? buf : bounds;  // bounds are no longer needed
  exact_scores(logp, base, ids.data(), static_cast<int64_t>(ids.size()), buf, f);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (buf[i] > best.score || (buf[i] == best.score && ids[i] < best.index)) best.score = buf[i], best.index = ids[i];
  }
  return best.index;
}

void check(const torch::Tensor& tokens, const torch::Tensor& logprobs, const torch::Tensor& states) {
  TORCH_CHECK(tokens.dtype() == torch::kInt64 && tokens.is_contiguous() && tokens.size(0) == logprobs.size(0),
              "exponential_race: [rows] int64 tokens expected");
  TORCH_CHECK(logprobs.dtype() == torch::kFloat32 && logprobs.is_contiguous() && logprobs.dim() == 2,
              "exponential_race: contiguous [rows, vocab] fp32 logprobs expected");
  TORCH_CHECK(states.dtype() == torch::kInt64 && states.is_contiguous() && states.size(0) == logprobs.size(0),
              "exponential_race: one int64 state per row expected");
  TORCH_CHECK(logprobs.size(1) <= INT32_MAX, "exponential_race: vocabulary too large");
  TORCH_CHECK(functions().ln != nullptr && functions().log1p8 != nullptr,
              "exponential_race: MKL's vmsLn or Sleef's log1p is not in this torch build");
}

void race(torch::Tensor token_ids, torch::Tensor logprobs, torch::Tensor states, float* scores) {
  check(token_ids, logprobs, states);
  int64_t* tokens = token_ids.data_ptr<int64_t>();
  const int64_t rows = logprobs.size(0), vocab = logprobs.size(1);
  const float* lp = logprobs.data_ptr<float>();
  const uint64_t* state = reinterpret_cast<const uint64_t*>(states.data_ptr<int64_t>());
  const Functions& f = functions();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(kBlock), bounds(scores != nullptr ? 0 : vocab);
    std::vector<int64_t> ids;
    for (int64_t r = begin; r < end; ++r)
      tokens[r] = scores != nullptr ? race_row_full(lp + r * vocab, state[r], vocab, buf.data(), scores + r * vocab, f)
                                    : race_row(lp + r * vocab, state[r], vocab, bounds.data(), buf.data(), ids, f);
  });
}

}  // namespace

bool race_available() { return functions().ln != nullptr && functions().log1p8 != nullptr; }

// tokens [R] int64 <- the race's winner per row.
void exponential_race(torch::Tensor tokens, torch::Tensor logprobs, torch::Tensor states) {
  race(tokens, logprobs, states, nullptr);
}

// The same, also writing every score into `scores` [R, V] fp32 (the check against the torch ops).
void exponential_race_scores(torch::Tensor tokens, torch::Tensor scores, torch::Tensor logprobs,
                             torch::Tensor states) {
  TORCH_CHECK(scores.sizes() == logprobs.sizes() && scores.dtype() == torch::kFloat32 && scores.is_contiguous(),
              "exponential_race_scores: scores shaped like logprobs expected");
  race(tokens, logprobs, states, scores.data_ptr<float>());
}

#else

bool race_available() { return false; }

void exponential_race(torch::Tensor, torch::Tensor, torch::Tensor) {
  TORCH_CHECK(false, "exponential_race: built without AVX");
}

void exponential_race_scores(torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor) {
  TORCH_CHECK(false, "exponential_race: built without AVX");
}

#endif
