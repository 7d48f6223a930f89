// The paged decode kernel's inner loops over one run of consecutive keys (part of one cache block):
// scores of several queries against the run's keys, and the probability-weighted sum of its values
// added into several queries' outputs. The run's keys and values are loaded once and stay in L1
// while every query that reads them is served (paged_decode_cpu.cpp groups a prompt's samples).
//
// Each (query, key) score and each output element is computed by the same operations in the same
// order whatever the number of queries served together: lane-wise partial dot products (eight lanes,
// or sixteen for the 16-key tiles of an AVX-512 build) reduced by one fixed tree, values accumulated
// key by key with one FMA per element. So a row's result never depends on which other rows shared its
// keys, bit for bit.

#pragma once

#include <torch/extension.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <type_traits>

namespace rollout_decode {

// The queries of one work item that read a run: query i's vector, its score row (indexed by key
// position minus the row's first key), and its output row.
struct Queries {
  const float* const* q;
  float* const* scores;
  float* const* out;
  const int64_t* first_key;  // per query: the position its score row starts at
  int64_t count;
};

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

// Any head size: key by key, query by query.
inline void scores_generic(const Queries& qs, const float* k, int64_t stride, int64_t from, int64_t to,
                           int64_t head_dim, float scale) {
  for (int64_t pos = from; pos < to; ++pos)
    for (int64_t i = 0; i < qs.count; ++i)
      qs.scores[i][pos - qs.first_key[i]] = dot(qs.q[i], k + (pos - from) * stride, head_dim) * scale;
}

inline void values_generic(const Queries& qs, const float* v, int64_t stride, int64_t from, int64_t to,
                           int64_t v_head_dim) {
  for (int64_t pos = from; pos < to; ++pos)
    for (int64_t i = 0; i < qs.count; ++i)
      axpy(qs.scores[i][pos - qs.first_key[i]], v + (pos - from) * stride, qs.out[i], v_head_dim);
}

#if defined(__AVX2__) && defined(__FMA__)

// Lane j <- the sum of a[j]'s eight lanes.
inline __m256 sum8(const __m256* a) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Scores of Q queries against eight consecutive keys (stride apart): one load of each key chunk for
// all Q queries. Q = 2 needs 16 accumulators plus operands: AVX-512's 32 registers, not AVX2's 16.
template <int D, int Q>
inline void dot8(const float* const* q, const float* k, int64_t stride, __m256* result) {
  __m256 acc[Q][8];
  for (int i = 0; i < Q; ++i)
    for (int j = 0; j < 8; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int d = 0; d < D; d += 8) {
    __m256 qv[Q];
    for (int i = 0; i < Q; ++i) qv[i] = _mm256_loadu_ps(q[i] + d);
    for (int j = 0; j < 8; ++j) {
      const __m256 kv = _mm256_loadu_ps(k + j * stride + d);
      for (int i = 0; i < Q; ++i) acc[i][j] = _mm256_fmadd_ps(qv[i], kv, acc[i][j]);
    }
  }
  for (int i = 0; i < Q; ++i) result[i] = sum8(acc[i]);
}

#if defined(__AVX512F__)
constexpr int kScoreQueries = 2;

// Lane j <- the sum of a[j]'s sixteen lanes: pairs within 128-bit lanes, then across them.
inline __m512 sum16(const __m512* a) {
  __m512 s[8], r[4], z[2];
  for (int i = 0; i < 8; ++i)
    s[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  for (int i = 0; i < 4; ++i)
    r[i] = _mm512_add_ps(_mm512_shuffle_ps(s[2 * i], s[2 * i + 1], 0x44), _mm512_shuffle_ps(s[2 * i], s[2 * i + 1], 0xEE));
  for (int i = 0; i < 2; ++i)
    z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], 0x88), _mm512_shuffle_f32x4(z[0], z[1], 0xDD));
}

template <int D>
inline __m512 dot16(const float* q, const float* k, int64_t stride) {
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int d = 0; d < D; d += 16) {
    const __m512 qv = _mm512_loadu_ps(q + d);
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k + j * stride + d), acc[j]);
  }
  return sum16(acc);
}
#else
constexpr int kScoreQueries = 1;
#endif

template <int D>
void scores_tiled(const Queries& qs, const float* k, int64_t stride, int64_t from, int64_t to, float scale) {
  const __m256 sc = _mm256_set1_ps(scale);
  int64_t pos = from;
#if defined(__AVX512F__)
  if constexpr (D % 16 == 0) {
    const __m512 sc16 = _mm512_set1_ps(scale);
    for (; pos + 16 <= to; pos += 16)
      for (int64_t i = 0; i < qs.count; ++i)
        _mm512_storeu_ps(qs.scores[i] + pos - qs.first_key[i],
                         _mm512_mul_ps(dot16<D>(qs.q[i], k + (pos - from) * stride, stride), sc16));
  }
#endif
  for (; pos + 8 <= to; pos += 8) {
    const float* k8 = k + (pos - from) * stride;
    int64_t i = 0;
    for (; i + kScoreQueries <= qs.count; i += kScoreQueries) {
      __m256 s[kScoreQueries];
      dot8<D, kScoreQueries>(qs.q + i, k8, stride, s);
      for (int j = 0; j < kScoreQueries; ++j)
        _mm256_storeu_ps(qs.scores[i + j] + pos - qs.first_key[i + j], _mm256_mul_ps(s[j], sc));
    }
    for (; i < qs.count; ++i) {
      __m256 s;
      dot8<D, 1>(qs.q + i, k8, stride, &s);
      _mm256_storeu_ps(qs.scores[i] + pos - qs.first_key[i], _mm256_mul_ps(s, sc));
    }
  }
  if (pos < to) scores_generic(qs, k + (pos - from) * stride, stride, pos, to, D, scale);
}

// out[i] += sum over the run's keys of p[i, key] * v[key], W lanes of the output at a time, Q queries
// at a time (one load of each value chunk for all of them). Every output lane is one FMA chain in key
// order, so the vector width changes nothing in the result: 512-bit vectors where a part still has
// four of them (four chains hide the FMA latency), 256-bit ones otherwise.
struct Ymm {
  using V = __m256;
  static constexpr int lanes = 8;
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V x) { _mm256_storeu_ps(p, x); }
  static V broadcast(float x) { return _mm256_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
};

#if defined(__AVX512F__)
struct Zmm {
  using V = __m512;
  static constexpr int lanes = 16;
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V x) { _mm512_storeu_ps(p, x); }
  static V broadcast(float x) { return _mm512_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
};
template <int W>
using ValueVec = std::conditional_t<W == 64, Zmm, Ymm>;
constexpr int kValueQueries = 4;  // 16 accumulators of 512 bits: half of AVX-512's registers
#else
template <int W>
using ValueVec = Ymm;
constexpr int kValueQueries = 1;  // 8 accumulators of 256 bits: half of AVX2's registers
#endif

template <int W, int Q>
inline void values_part(const Queries& qs, int64_t i, const float* v, int64_t stride, int64_t from,
                        int64_t to, int part) {
  using Vec = ValueVec<W>;
  constexpr int C = W / Vec::lanes;
  typename Vec::V acc[Q][C];
  const float* p[Q];
  for (int a = 0; a < Q; ++a) {
    p[a] = qs.scores[i + a] - qs.first_key[i + a];
    for (int c = 0; c < C; ++c) acc[a][c] = Vec::load(qs.out[i + a] + part + c * Vec::lanes);
  }
  for (int64_t pos = from; pos < to; ++pos) {
    const float* vk = v + (pos - from) * stride + part;
    typename Vec::V vv[C];
    for (int c = 0; c < C; ++c) vv[c] = Vec::load(vk + c * Vec::lanes);
    for (int a = 0; a < Q; ++a) {
      const typename Vec::V w = Vec::broadcast(p[a][pos]);
      for (int c = 0; c < C; ++c) acc[a][c] = Vec::fma(w, vv[c], acc[a][c]);
    }
  }
  for (int a = 0; a < Q; ++a)
    for (int c = 0; c < C; ++c) Vec::store(qs.out[i + a] + part + c * Vec::lanes, acc[a][c]);
}

template <int D>
void values_tiled(const Queries& qs, const float* v, int64_t stride, int64_t from, int64_t to) {
  constexpr int W = D % 64 == 0 ? 64 : 32;
  for (int part = 0; part < D; part += W) {
    int64_t i = 0;
    for (; i + kValueQueries <= qs.count; i += kValueQueries)
      values_part<W, kValueQueries>(qs, i, v, stride, from, to, part);
    for (; i < qs.count; ++i) values_part<W, 1>(qs, i, v, stride, from, to, part);
  }
}

// Calls tiled(std::integral_constant<int, D>) for the register-tiled head sizes; false otherwise.
template <typename Tiled>
bool dispatch_head_dim(int64_t head_dim, int64_t v_head_dim, Tiled&& tiled) {
  if (head_dim != v_head_dim) return false;
  switch (head_dim) {
    case 32: return tiled(std::integral_constant<int, 32>{}), true;
    case 64: return tiled(std::integral_constant<int, 64>{}), true;
    case 96: return tiled(std::integral_constant<int, 96>{}), true;
    case 128: return tiled(std::integral_constant<int, 128>{}), true;
    case 256: return tiled(std::integral_constant<int, 256>{}), true;
    default: return false;
  }
}

#endif

// The run's scores and values: the register-tiled paths where the head size has one.
inline void scores_run(const Queries& qs, const float* k, int64_t stride, int64_t from, int64_t to,
                       int64_t head_dim, int64_t v_head_dim, float scale) {
#if defined(__AVX2__) && defined(__FMA__)
  if (dispatch_head_dim(head_dim, v_head_dim, [&](auto d) {
        scores_tiled<decltype(d)::value>(qs, k, stride, from, to, scale);
      }))
    return;
#endif
  scores_generic(qs, k, stride, from, to, head_dim, scale);
}

inline void values_run(const Queries& qs, const float* v, int64_t stride, int64_t from, int64_t to,
                       int64_t head_dim, int64_t v_head_dim) {
#if defined(__AVX2__) && defined(__FMA__)
  if (dispatch_head_dim(head_dim, v_head_dim, [&](auto d) {
        values_tiled<decltype(d)::value>(qs, v, stride, from, to);
      }))
    return;
#endif
  values_generic(qs, v, stride, from, to, v_head_dim);
}

}  // namespace rollout_decode
