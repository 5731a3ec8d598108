// Chapter 4's sharing scenario, for the CPU cache's tests and the GPU cache's: prompts that
// begin alike and a fork, decoded over a sharing cache and over chapter 3's unshared one.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <vector>

#include "common/cache/batch.hpp"
#include "common/model/model_config.hpp"
#include "common/serving/sampler.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap::test {

/// Logits of one row of a forward pass, copied out.
inline std::vector<float> row(std::span<const float> logits, int i, int vocab) {
  return {logits.begin() + static_cast<long>(i) * vocab,
          logits.begin() + static_cast<long>(i + 1) * vocab};
}

/// Three sequences: A with prompt `pa`; B with prompt `pb`, which starts with blocks A fills; C,
/// a fork of A after its prefill, which then writes its own tokens into A's shared last block.
/// Chapter 3 runs the same three as unrelated sequences, each prompt prefilled in full. Returns
/// the largest relative difference of any logits row over `steps` decode steps.
///
/// The same on any backend: `fwd` runs batches over `shared` (chapter 4) and `alone` (chapter 3),
/// both fresh caches of blocks of `block_size`; `read_once` says whether `shared` reads shared
/// prefixes once (then the rows must read fewer positions than their contexts add up to).
template <class Forward, class SharedCache, class AloneCache>
double shared_vs_unshared(Forward& fwd, SharedCache& shared, AloneCache& alone,
                          const ModelConfig& c, int block_size, const std::vector<int>& pa,
                          const std::vector<int>& pb, int steps, bool read_once = true) {
  const int V = c.vocab_size;
  double worst = 0;
  auto compare = [&](const std::vector<float>& got, const std::vector<float>& want) {
    worst = std::max(worst, test::rel_inf_error(got, want));
  };
  auto prefill = [&](auto& cache, int seq, const std::vector<int>& prompt, int from) {
    Batch b;
    for (int p = from; p < static_cast<int>(prompt.size()); ++p)
      b.rows.push_back({prompt[p], seq, p, p + 1 == static_cast<int>(prompt.size())});
    return row(fwd.forward(b, cache), 0, V);
  };

  // Chapter 4: A prefilled; B takes A's cached blocks and computes only the rest; C forks A.
  const int a = shared.blocks().allocate(pa);
  const std::vector<float> la = prefill(shared, a, pa, 0);
  const int b = shared.blocks().allocate(pb);
  EXPECT_GT(shared.blocks().length(b), 0) << "B should start from A's cached blocks";
  const std::vector<float> lb = prefill(shared, b, pb, shared.blocks().length(b));
  const int cs = shared.blocks().fork(a);
  // Chapter 3: three sequences, each prompt computed in full.
  const int a3 = alone.blocks().allocate(), b3 = alone.blocks().allocate(),
            c3 = alone.blocks().allocate();
  compare(la, prefill(alone, a3, pa, 0));
  compare(lb, prefill(alone, b3, pb, 0));
  (void)prefill(alone, c3, pa, 0);

  std::vector<int> next = {argmax(la), argmax(lb), (argmax(la) + 1) % V};  // C diverges at once
  std::vector<int> len = {static_cast<int>(pa.size()), static_cast<int>(pb.size()),
                          static_cast<int>(pa.size())};
  for (int step = 0; step < steps; ++step) {
    Batch s4, s3;
    const int seq4[] = {a, b, cs}, seq3[] = {a3, b3, c3};
    for (int i = 0; i < 3; ++i) {
      s4.rows.push_back({next[i], seq4[i], len[i], true});
      s3.rows.push_back({next[i], seq3[i], len[i], true});
    }
    const auto l4 = fwd.forward(s4, shared);
    const std::vector<float> got(l4.begin(), l4.end());
    // A, B and C begin with the same blocks, so their rows read them once.
    if (read_once) {
      EXPECT_LT(shared.positions_read(), len[0] + len[1] + len[2] + 3);
    }
    const auto l3 = fwd.forward(s3, alone);
    compare(got, std::vector<float>(l3.begin(), l3.end()));
    for (int i = 0; i < 3; ++i) {
      next[i] = argmax(std::span<const float>(&got[static_cast<std::size_t>(i) * V], V));
      ++len[i];
    }
  }
  EXPECT_GT(shared.blocks().counters().copies_on_write + (pa.size() % block_size == 0 ? 1 : 0), 0)
      << "C's first token should have copied A's shared last block";
  shared.blocks().check_invariants();
  EXPECT_LT(shared.blocks().blocks_held(), alone.blocks().pool().num_used())
      << "sharing should store fewer blocks than three unshared sequences";
  return worst;
}

}  // namespace kvheap::test
