// Paged decode attention for the CPU: one query token per sequence, keys and values read in place
// from the paged cache through the block table (no gathered copy), exact softmax in fp32.
//
// Work item = (sequence, KV head): the KV head's group of query heads shares every key it loads, and
// the sequences of one prompt (its n samples) sit next to each other, so the prompt blocks they share
// are still in cache when the next sample reads them.

#include <torch/extension.h>
#include <ATen/Parallel.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "exp_approx.h"

namespace {

inline float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float acc = 0.f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

inline void axpy(float w, const float* __restrict x, float* __restrict y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += w * x[i];
}

struct Shapes {
  int64_t heads, kv_heads, group, head_dim, v_head_dim, block_size, max_blocks;
};

// Calls visit(first_pos, end_pos, first_slot) for each block's run of keys in [start, len).
template <typename Visit>
inline void for_each_run(int64_t start, int64_t len, const int32_t* table, int64_t block_size, Visit&& visit) {
  for (int64_t b = start / block_size, first = b * block_size; first < len; ++b, first += block_size) {
    const int64_t from = std::max(start, first), to = std::min(len, first + block_size);
    visit(from, to, static_cast<int64_t>(table[b]) * block_size + from - first);
  }
}

// Calls visit(pos, slot) for pos in [start, len), block by block (no division per key).
template <typename Visit>
inline void for_each_key(int64_t start, int64_t len, const int32_t* table, int64_t block_size, Visit&& visit) {
  for_each_run(start, len, table, block_size, [&](int64_t from, int64_t to, int64_t slot) {
    for (int64_t pos = from; pos < to; ++pos) visit(pos, slot + pos - from);
  });
}

#if defined(__AVX2__) && defined(__FMA__)

// Lane j <- the sum of a[j]'s eight lanes.
inline __m256 sum8(const __m256* a) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Scores of one query against eight consecutive keys (stride apart): eight dot products, one reduction.
template <int D>
inline __m256 dot8(const float* q, const float* k, int64_t stride) {
  __m256 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
  for (int d = 0; d < D; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + j * stride + d), acc[j]);
  }
  return sum8(acc);
}

template <int D>
void scores_tiled(const float* q, const float* k_head, int64_t stride, const int32_t* table, int64_t start,
                  int64_t len, float scale, const Shapes& s, float* scores) {
  const int64_t n = len - start;
  const __m256 sc = _mm256_set1_ps(scale);
  for_each_run(start, len, table, s.block_size, [&](int64_t from, int64_t to, int64_t slot) {
    for (int64_t g = 0; g < s.group; ++g) {
      const float* qg = q + g * D;
      float* row = scores + g * n - start;
      int64_t pos = from;
      for (; pos + 8 <= to; pos += 8)
        _mm256_storeu_ps(row + pos, _mm256_mul_ps(dot8<D>(qg, k_head + (slot + pos - from) * stride, stride), sc));
      for (; pos < to; ++pos) row[pos] = dot(qg, k_head + (slot + pos - from) * stride, D) * scale;
    }
  });
}

// out[g] <- sum over keys of p[g, key] * v[key], the accumulator held in registers W lanes at a time.
template <int D>
void values_tiled(const float* p, const float* v_head, int64_t stride, const int32_t* table, int64_t start,
                  int64_t len, const Shapes& s, float* out) {
  constexpr int W = D % 64 == 0 ? 64 : 32, C = W / 8;
  const int64_t n = len - start;
  for (int64_t g = 0; g < s.group; ++g) {
    for (int part = 0; part < D; part += W) {
      __m256 acc[C];
      for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
      for_each_run(start, len, table, s.block_size, [&](int64_t from, int64_t to, int64_t slot) {
        for (int64_t pos = from; pos < to; ++pos) {
          const __m256 w = _mm256_set1_ps(p[g * n + pos - start]);
          const float* v = v_head + (slot + pos - from) * stride + part;
          for (int c = 0; c < C; ++c) acc[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 8 * c), acc[c]);
        }
      });
      for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + g * D + part + 8 * c, acc[c]);
    }
  }
}

#endif

// The register-tiled paths for the common head sizes (keys and values alike); false: use the generic one.
#if defined(__AVX2__) && defined(__FMA__)
template <typename Tiled>
bool dispatch_head_dim(const Shapes& s, Tiled&& tiled) {
  if (s.head_dim != s.v_head_dim) return false;
  switch (s.head_dim) {
    case 32: return tiled(std::integral_constant<int, 32>{}), true;
    case 64: return tiled(std::integral_constant<int, 64>{}), true;
    case 96: return tiled(std::integral_constant<int, 96>{}), true;
    case 128: return tiled(std::integral_constant<int, 128>{}), true;
    case 256: return tiled(std::integral_constant<int, 256>{}), true;
    default: return false;
  }
}

bool tiled_scores(const float* q, const float* k_head, int64_t stride, const int32_t* table, int64_t start,
                  int64_t len, float scale, const Shapes& s, float* scores) {
  return dispatch_head_dim(s, [&](auto d) {
    scores_tiled<decltype(d)::value>(q, k_head, stride, table, start, len, scale, s, scores);
  });
}

bool tiled_values(const float* p, const float* v_head, int64_t stride, const int32_t* table, int64_t start,
                  int64_t len, const Shapes& s, float* out) {
  return dispatch_head_dim(s, [&](auto d) {
    values_tiled<decltype(d)::value>(p, v_head, stride, table, start, len, s, out);
  });
}
#else
bool tiled_scores(const float*, const float*, int64_t, const int32_t*, int64_t, int64_t, float, const Shapes&, float*) {
  return false;
}
bool tiled_values(const float*, const float*, int64_t, const int32_t*, int64_t, int64_t, const Shapes&, float*) {
  return false;
}
#endif

// One (sequence, KV head): scores for the group's queries over keys [start, len), softmax, V sum.
void attend_one(const float* q,            // [group, head_dim] this KV head's queries
                const float* k_cache,      // [num_blocks, block_size, kv_heads, head_dim]
                const float* v_cache,      // [num_blocks, block_size, kv_heads, v_head_dim]
                const int32_t* table,      // [max_blocks]
                int64_t start, int64_t len, int64_t kv_head, float scale, const Shapes& s,
                std::vector<float>& scores,  // scratch, resized here
                float* out) {              // [group, v_head_dim]
  const int64_t g_count = s.group, n = len - start;
  std::fill(out, out + g_count * s.v_head_dim, 0.f);
  if (n <= 0) return;
  scores.resize(static_cast<size_t>(g_count * n));
  const int64_t k_stride = s.kv_heads * s.head_dim, v_stride = s.kv_heads * s.v_head_dim;
  if (!tiled_scores(q, k_cache + kv_head * s.head_dim, k_stride, table, start, len, scale, s, scores.data())) {
    for_each_key(start, len, table, s.block_size, [&](int64_t pos, int64_t slot) {
      const float* k = k_cache + slot * k_stride + kv_head * s.head_dim;
      for (int64_t g = 0; g < g_count; ++g) scores[g * n + pos - start] = dot(q + g * s.head_dim, k, s.head_dim) * scale;
    });
  }
  for (int64_t g = 0; g < g_count; ++g) {
    float* row = scores.data() + g * n;
    float max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max)
    for (int64_t i = 0; i < n; ++i) max = row[i] > max ? row[i] : max;
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) {
      row[i] = rollout_math::exp_approx(row[i] - max);
      sum += row[i];
    }
    const float inv = 1.f / sum;
    for (int64_t i = 0; i < n; ++i) row[i] *= inv;
  }
  if (tiled_values(scores.data(), v_cache + kv_head * s.v_head_dim, v_stride, table, start, len, s, out)) return;
  for_each_key(start, len, table, s.block_size, [&](int64_t pos, int64_t slot) {
    const float* v = v_cache + slot * v_stride + kv_head * s.v_head_dim;
    for (int64_t g = 0; g < g_count; ++g) axpy(scores[g * n + pos - start], v, out + g * s.v_head_dim, s.v_head_dim);
  });
}

}  // namespace

// out [R, H, Dv] <- attention of query [R, H, D] (fp32, contiguous) over each row's keys
// [starts[r], seq_lens[r]) in the paged caches; block_tables [R, max_blocks] int32.
void paged_decode(torch::Tensor out, torch::Tensor query, torch::Tensor key_cache, torch::Tensor value_cache,
                  torch::Tensor block_tables, torch::Tensor seq_lens, torch::Tensor starts, double scale) {
  TORCH_CHECK(query.dtype() == torch::kFloat32 && key_cache.dtype() == torch::kFloat32 &&
                  value_cache.dtype() == torch::kFloat32 && out.dtype() == torch::kFloat32,
              "paged_decode: fp32 tensors expected");
  TORCH_CHECK(query.is_contiguous() && key_cache.is_contiguous() && value_cache.is_contiguous() &&
                  out.is_contiguous() && block_tables.is_contiguous(),
              "paged_decode: contiguous tensors expected");
  TORCH_CHECK(block_tables.dtype() == torch::kInt32 && seq_lens.dtype() == torch::kInt64 &&
                  starts.dtype() == torch::kInt64,
              "paged_decode: int32 block tables, int64 lengths and starts expected");
  const int64_t rows = query.size(0);
  Shapes s{query.size(1), key_cache.size(2), query.size(1) / key_cache.size(2), query.size(2),
           value_cache.size(3), key_cache.size(1), block_tables.size(1)};
  TORCH_CHECK(s.heads % s.kv_heads == 0, "paged_decode: heads must be a multiple of KV heads");
  const float* q = query.data_ptr<float>();
  const float* kc = key_cache.data_ptr<float>();
  const float* vc = value_cache.data_ptr<float>();
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  const int64_t* lens = seq_lens.data_ptr<int64_t>();
  const int64_t* first = starts.data_ptr<int64_t>();
  float* o = out.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  at::parallel_for(0, rows * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / s.kv_heads, h = item % s.kv_heads;
      const int64_t offset = (r * s.heads + h * s.group);
      attend_one(q + offset * s.head_dim, kc, vc, tables + r * s.max_blocks, first[r], lens[r], h, sc, s, scores,
                 o + offset * s.v_head_dim);
    }
  });
}
