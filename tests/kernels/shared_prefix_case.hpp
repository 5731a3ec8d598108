// A random shared-prefix attention problem, for the CPU twin's tests and the GPU kernel's: a
// shuffled pool of random K and V, groups of sequences whose page tables begin with the same
// blocks, one sequence that shares nothing, and one decode row per sequence.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "chapters/03_paged_blocks/paged_cache.hpp"
#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "common/model/model_config.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/shared_prefix_attention.hpp"

namespace kvheap::test {

/// Heads and block size of a case.
struct SharedPrefixShape {
  int n_kv_heads, group, head_dim, block_size;
};

/// Sequences: for each entry of `prefix_blocks` (one per group), `members` sequences (or
/// `members_of[g]` for group g when given) whose page
/// tables start with that many common blocks and go on with 0..private_positions positions of
/// their own; then one sequence that shares nothing. The plan is built by chapter 4's
/// plan_shared_prefixes, and checked to find exactly those groups.
template <class T>
struct SharedPrefixCase {
  ModelConfig config;
  int block_size = 0;
  int num_blocks = 0;
  std::vector<T> k, v;  // [num_blocks * block_size, kv_dim]
  KVView pages;
  SharedPrefixPlan plan;
  std::vector<float> q;  // [n, q_dim]

  /// The head geometry as the CPU twin takes it.
  [[nodiscard]] cpu::AttendShape shape() const {
    return {config.n_kv_heads, config.group_size(), config.head_dim};
  }

  SharedPrefixCase(const SharedPrefixShape& s, const std::vector<int>& prefix_blocks, int members,
                   int private_positions, unsigned seed, std::vector<int> members_of = {})
      : block_size(s.block_size) {
    config.n_kv_heads = s.n_kv_heads;
    config.n_heads = s.n_kv_heads * s.group;
    config.head_dim = s.head_dim;
    const int bs = s.block_size;
    if (members_of.empty()) members_of.assign(prefix_blocks.size(), members);
    num_blocks = 64;
    for (std::size_t g = 0; g < prefix_blocks.size(); ++g)
      num_blocks += prefix_blocks[g] + members_of[g] * ((private_positions + bs - 1) / bs + 1);
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    k.resize(static_cast<std::size_t>(num_blocks) * bs * config.kv_dim());
    v.resize(k.size());
    for (std::size_t e = 0; e < k.size(); ++e) {
      cpu::from_float(nd(rng), k[e]);
      cpu::from_float(nd(rng), v[e]);
    }
    std::vector<int> free_blocks(num_blocks);
    for (int b = 0; b < num_blocks; ++b) free_blocks[b] = b;
    std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
    auto take = [&] {
      const int b = free_blocks.back();
      free_blocks.pop_back();
      return b;
    };
    pages.indptr = {0};
    auto add_sequence = [&](const std::vector<int>& table, int length) {
      pages.indices.insert(pages.indices.end(), table.begin(), table.end());
      pages.indptr.push_back(static_cast<int>(pages.indices.size()));
      pages.last_page_len.push_back((length - 1) % bs + 1);
      pages.row_seq.push_back(static_cast<int>(pages.row_seq.size()));
      pages.n_ctx.push_back(length);
      pages.max_ctx = std::max(pages.max_ctx, length);
    };
    for (std::size_t g = 0; g < prefix_blocks.size(); ++g) {
      const int prefix = prefix_blocks[g];
      std::vector<int> shared;
      for (int b = 0; b < prefix; ++b) shared.push_back(take());
      for (int m = 0; m < members_of[g]; ++m) {
        const int extra = static_cast<int>(rng() % (private_positions + 1));  // 0: no own part
        std::vector<int> table = shared;
        for (int b = 0; b < (extra + bs - 1) / bs; ++b) table.push_back(take());
        add_sequence(table, prefix * bs + extra);
      }
    }
    std::vector<int> alone;
    for (int b = 0; b < 3; ++b) alone.push_back(take());
    add_sequence(alone, 3 * bs - 1);
    plan = ch04::plan_shared_prefixes(pages, bs);
    EXPECT_EQ(plan.groups(), static_cast<int>(prefix_blocks.size()));
    for (int g = 0; g < plan.groups(); ++g) EXPECT_EQ(plan.prefix_len[g], prefix_blocks[g] * bs);
    q.resize(static_cast<std::size_t>(n()) * config.q_dim());
    std::normal_distribution<float> sharp(0.0f, 2.0f);  // peaky enough that softmax matters
    for (float& x : q) x = sharp(rng);
  }

  [[nodiscard]] int n() const { return static_cast<int>(pages.n_ctx.size()); }
  [[nodiscard]] auto rows_of() const {
    return [this](int i) {
      return cpu::PagedRows<T>{k.data(), v.data(),
                               pages.indices.data() + pages.indptr[pages.row_seq[i]], block_size,
                               config.kv_dim()};
    };
  }
  [[nodiscard]] auto n_ctx_of() const {
    return [this](int i) { return pages.n_ctx[i]; };
  }
  /// Plain paged attention (every row reads its whole context) into out [n, q_dim].
  void attend_plain(float* out) const {
    cpu::attend_batch<T>(shape(), n(), rows_of(), n_ctx_of(), q.data(), out);
  }
};

}  // namespace kvheap::test
