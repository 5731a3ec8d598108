// A random shared-prefix attention problem, for the CPU twin's tests and the GPU kernel's: a
// shuffled pool of random K and V, sequences whose page tables begin with the same blocks (one
// level of groups, or a tree of them), one sequence that shares nothing, and one decode row per
// sequence.
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
#include "kernels/shared_prefix_attention_cpu.hpp"

namespace kvheap::test {

/// Heads and block size of a case.
struct SharedPrefixShape {
  int n_kv_heads, group, head_dim, block_size;
};

/// One level of a tree of shared prefixes: `blocks` blocks that every sequence below it holds,
/// then `leaves` sequences that end here, each with 0..private_positions positions of its own,
/// then the levels below.
struct PrefixLevel {
  int blocks = 0;
  int leaves = 0;
  std::vector<PrefixLevel> below;
  /// Sequences that hold this level's blocks.
  [[nodiscard]] int sequences() const {
    int n = leaves;
    for (const PrefixLevel& l : below) n += l.sequences();
    return n;
  }
};

/// A tree of sequences laid out in a shuffled pool (`roots`, each a tree of PrefixLevel), then one
/// sequence that shares nothing; one decode row per sequence. The plan is built by chapter 4's
/// plan_shared_prefixes, and checked to find exactly one group per level that two sequences or
/// more hold, in depth-first order, with its first position and length.
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

  /// One level per entry of `prefix_blocks`, each with `members` sequences (or `members_of[g]`
  /// for group g when given) and nothing below.
  SharedPrefixCase(const SharedPrefixShape& s, const std::vector<int>& prefix_blocks, int members,
                   int private_positions, unsigned seed, std::vector<int> members_of = {})
      : SharedPrefixCase(s, one_level(prefix_blocks, members, std::move(members_of)),
                         private_positions, seed) {}

  SharedPrefixCase(const SharedPrefixShape& s, const std::vector<PrefixLevel>& roots,
                   int private_positions, unsigned seed)
      : block_size(s.block_size) {
    config.n_kv_heads = s.n_kv_heads;
    config.n_heads = s.n_kv_heads * s.group;
    config.head_dim = s.head_dim;
    const int bs = s.block_size;
    num_blocks = 64 + blocks_of(roots, (private_positions + bs - 1) / bs + 1);
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
    SharedPrefixPlan want;  // the groups the levels make, depth first
    auto build = [&](auto& self, const std::vector<PrefixLevel>& levels,
                     const std::vector<int>& above) -> void {
      for (const PrefixLevel& level : levels) {
        std::vector<int> shared = above;
        for (int b = 0; b < level.blocks; ++b) shared.push_back(take());
        if (level.sequences() >= 2) {
          want.prefix_begin.push_back(static_cast<int>(above.size()) * bs);
          want.prefix_len.push_back(level.blocks * bs);
        }
        for (int m = 0; m < level.leaves; ++m) {
          const int extra = static_cast<int>(rng() % (private_positions + 1));  // 0: no own part
          std::vector<int> table = shared;
          for (int b = 0; b < (extra + bs - 1) / bs; ++b) table.push_back(take());
          add_sequence(table, static_cast<int>(shared.size()) * bs + extra);
        }
        self(self, level.below, shared);
      }
    };
    build(build, roots, {});
    std::vector<int> alone;
    for (int b = 0; b < 3; ++b) alone.push_back(take());
    add_sequence(alone, 3 * bs - 1);
    plan = ch04::plan_shared_prefixes(pages, bs);
    EXPECT_EQ(plan.prefix_begin, want.prefix_begin);
    EXPECT_EQ(plan.prefix_len, want.prefix_len);
    q.resize(static_cast<std::size_t>(n()) * config.q_dim());
    std::normal_distribution<float> sharp(0.0f, 2.0f);  // peaky enough that softmax matters
    for (float& x : q) x = sharp(rng);
  }

  static std::vector<PrefixLevel> one_level(const std::vector<int>& prefix_blocks, int members,
                                            std::vector<int> members_of) {
    if (members_of.empty()) members_of.assign(prefix_blocks.size(), members);
    std::vector<PrefixLevel> roots;
    for (std::size_t g = 0; g < prefix_blocks.size(); ++g)
      roots.push_back({prefix_blocks[g], members_of[g], {}});
    return roots;
  }
  /// Blocks the levels take, with `own` blocks for each leaf.
  static int blocks_of(const std::vector<PrefixLevel>& levels, int own) {
    int total = 0;
    for (const PrefixLevel& l : levels)
      total += l.blocks + l.leaves * own + blocks_of(l.below, own);
    return total;
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
  /// Shared-prefix attention through `p` (the case's plan, or one cut from it) into out [n, q_dim].
  void attend_shared(const SharedPrefixPlan& p, float* out) const {
    cpu::attend_batch_shared_prefix<T>(shape(), n(), rows_of(), n_ctx_of(), p, q.data(), out);
  }
};

}  // namespace kvheap::test
