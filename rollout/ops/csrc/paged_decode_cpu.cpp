// Paged decode attention for the CPU: one query token per sequence, keys and values read in place
// from the paged cache through the block table (no gathered copy), exact softmax in fp32.
//
// Work item = (group of rows, KV head). Consecutive rows whose block tables begin with the same full
// blocks (a prompt's n samples) form a group: each shared key and value is loaded once and serves
// every query of the group while it is in L1 (paged_decode_tiles.h), then each row reads its own
// blocks. A row's result is the same, bit for bit, whether it was grouped or alone.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "exp_approx.h"
#include "paged_decode_tiles.h"

namespace {

using rollout_decode::Queries;

constexpr int64_t kMaxGroupRows = 16;  // larger groups would leave too few work items for the threads

struct Shapes {
  int64_t heads, kv_heads, group, head_dim, v_head_dim, block_size, max_blocks;
};

struct Batch {
  const float* q;               // [R, H, D]
  const float* k_cache;         // [num_blocks, block_size, kv_heads, head_dim]
  const float* v_cache;         // [num_blocks, block_size, kv_heads, v_head_dim]
  const int32_t* tables;        // [R, max_blocks]
  const int64_t* lens;          // [R]
  const int64_t* first;         // [R] first key each row may see
  float* out;                   // [R, H, Dv]
  float scale;
  Shapes s;
};

// The number of keys row r attends to: [first[r], lens[r]).
int64_t keys_of(const Batch& b, int64_t r) { return std::max<int64_t>(0, b.lens[r] - b.first[r]); }

// Rows [begin, end) and the keys [0, shared) their tables all map to the same blocks.
struct Group {
  int64_t begin, end, shared;
};

int64_t common_blocks(const Batch& b, int64_t r0, int64_t r1, int64_t limit) {
  const int32_t* t0 = b.tables + r0 * b.s.max_blocks;
  const int32_t* t1 = b.tables + r1 * b.s.max_blocks;
  int64_t n = 0;
  while (n < limit && t0[n] == t1[n]) ++n;
  return n;
}

// Greedy over consecutive rows: a row joins the group when it shares all of the group's blocks.
// Rows with a window or chunk start (first key > 0) stay alone.
std::vector<Group> plan_groups(const Batch& b, int64_t rows) {
  std::vector<Group> groups;
  const int64_t bs = b.s.block_size;
  for (int64_t r = 0; r < rows;) {
    int64_t end = r + 1, blocks = b.first[r] == 0 ? b.lens[r] / bs : 0;
    if (blocks > 0 && end < rows && b.first[end] == 0)
      blocks = common_blocks(b, r, end, std::min(blocks, b.lens[end] / bs));
    while (blocks > 0 && end < rows && end - r < kMaxGroupRows && b.first[end] == 0 &&
           b.lens[end] / bs >= blocks && common_blocks(b, r, end, blocks) == blocks)
      ++end;
    groups.push_back({r, end, end - r > 1 ? blocks * bs : 0});
    r = end;
  }
  return groups;
}

// Items are (group, KV head) in order; thread t takes items [ends[t-1], ends[t]), contiguous runs of
// about equal work (keys times queries, plus a fixed cost per row): groups and long rows make item
// sizes uneven, and contiguous runs keep a thread on the same rows step after step.
std::vector<int64_t> balanced_split(const Batch& b, const std::vector<Group>& groups, int64_t threads) {
  std::vector<int64_t> cost(groups.size());
  int64_t total = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    for (int64_t r = groups[i].begin; r < groups[i].end; ++r)
      cost[i] += 16 + keys_of(b, r);
    total += cost[i] * b.s.kv_heads;
  }
  std::vector<int64_t> ends;
  int64_t item = 0, done = 0;
  const int64_t items = static_cast<int64_t>(groups.size()) * b.s.kv_heads;
  for (int64_t t = 1; t <= threads; ++t) {
    const int64_t target = total * t / threads;
    while (item < items && done + cost[item / b.s.kv_heads] / 2 <= target) done += cost[item++ / b.s.kv_heads];
    ends.push_back(t == threads ? items : item);
  }
  return ends;
}

// Per thread: the item's query pointers, score rows and scratch.
struct Scratch {
  std::vector<const float*> q;
  std::vector<float*> scores, out;
  std::vector<int64_t> first_key;
  std::vector<float> buffer;

  Queries queries(int64_t from, int64_t count) const {
    return {q.data() + from, scores.data() + from, out.data() + from, first_key.data() + from, count};
  }
};

void softmax_row(float* row, int64_t n) {
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

// Fills the scratch with the group's queries of KV head h: row by row, its `group` query heads.
void gather_queries(const Batch& b, const Group& g, int64_t h, Scratch& w) {
  const Shapes& s = b.s;
  int64_t total = 0;
  for (int64_t r = g.begin; r < g.end; ++r) total += s.group * keys_of(b, r);
  w.buffer.resize(static_cast<size_t>(total));
  w.q.clear(), w.scores.clear(), w.out.clear(), w.first_key.clear();
  float* row = w.buffer.data();
  for (int64_t r = g.begin; r < g.end; ++r) {
    const int64_t n = keys_of(b, r);
    for (int64_t j = 0; j < s.group; ++j, row += n) {
      const int64_t head = r * s.heads + h * s.group + j;
      w.q.push_back(b.q + head * s.head_dim);
      w.out.push_back(b.out + head * s.v_head_dim);
      w.scores.push_back(row);
      w.first_key.push_back(b.first[r]);
      std::fill(b.out + head * s.v_head_dim, b.out + (head + 1) * s.v_head_dim, 0.f);
    }
  }
}

// Calls visit(from, to, first_slot) for each block's run of keys in [start, len).
template <typename Visit>
void for_each_run(int64_t start, int64_t len, const int32_t* table, int64_t block_size, Visit&& visit) {
  for (int64_t b = start / block_size, first = b * block_size; first < len; ++b, first += block_size) {
    const int64_t from = std::max(start, first), to = std::min(len, first + block_size);
    visit(from, to, static_cast<int64_t>(table[b]) * block_size + from - first);
  }
}

// Each pass walks the shared keys once for the whole group, then each row's own keys for its queries.
template <typename Pass>
void walk(const Batch& b, const Group& g, const Scratch& w, Pass&& pass) {
  const int64_t all = (g.end - g.begin) * b.s.group;
  for_each_run(0, g.shared, b.tables + g.begin * b.s.max_blocks, b.s.block_size,
               [&](int64_t from, int64_t to, int64_t slot) { pass(w.queries(0, all), from, to, slot); });
  for (int64_t r = g.begin; r < g.end; ++r) {
    const Queries own = w.queries((r - g.begin) * b.s.group, b.s.group);
    for_each_run(std::max(g.shared, b.first[r]), b.lens[r], b.tables + r * b.s.max_blocks, b.s.block_size,
                 [&](int64_t from, int64_t to, int64_t slot) { pass(own, from, to, slot); });
  }
}

void attend_group(const Batch& b, const Group& g, int64_t h, Scratch& w) {
  const Shapes& s = b.s;
  gather_queries(b, g, h, w);
  const int64_t k_stride = s.kv_heads * s.head_dim, v_stride = s.kv_heads * s.v_head_dim;
  const float* k_head = b.k_cache + h * s.head_dim;
  const float* v_head = b.v_cache + h * s.v_head_dim;
  walk(b, g, w, [&](const Queries& qs, int64_t from, int64_t to, int64_t slot) {
    rollout_decode::scores_run(qs, k_head + slot * k_stride, k_stride, from, to, s.head_dim, s.v_head_dim,
                               b.scale);
  });
  for (int64_t r = g.begin, i = 0; r < g.end; ++r)
    for (int64_t j = 0; j < s.group; ++j, ++i) softmax_row(w.scores[i], keys_of(b, r));
  walk(b, g, w, [&](const Queries& qs, int64_t from, int64_t to, int64_t slot) {
    rollout_decode::values_run(qs, v_head + slot * v_stride, v_stride, from, to, s.head_dim, s.v_head_dim);
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
  const Shapes s{query.size(1), key_cache.size(2), query.size(1) / key_cache.size(2), query.size(2),
                 value_cache.size(3), key_cache.size(1), block_tables.size(1)};
  TORCH_CHECK(s.heads % s.kv_heads == 0, "paged_decode: heads must be a multiple of KV heads");
  const Batch b{query.data_ptr<float>(), key_cache.data_ptr<float>(), value_cache.data_ptr<float>(),
                block_tables.data_ptr<int32_t>(), seq_lens.data_ptr<int64_t>(), starts.data_ptr<int64_t>(),
                out.data_ptr<float>(), static_cast<float>(scale), s};
  const std::vector<Group> groups = plan_groups(b, rows);
  const std::vector<int64_t> ends = balanced_split(b, groups, at::get_num_threads());
  at::parallel_for(0, static_cast<int64_t>(ends.size()), 1, [&](int64_t begin, int64_t end) {
    Scratch w;
    for (int64_t t = begin; t < end; ++t)
      for (int64_t item = t == 0 ? 0 : ends[t - 1]; item < ends[t]; ++item)
        attend_group(b, groups[item / s.kv_heads], item % s.kv_heads, w);
  });
}
