// Chapter 4's claim about the model's output: sequences that share blocks, by fork or through the
// prefix index, compute the logits they would compute alone (chapter 3, every prompt prefilled in
// full), although the positions they share were computed once, in another sequence's batch.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "chapters/03_paged_blocks/paged_cache.hpp"
#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "common/forward/forward_cpu.hpp"
#include "common/model/llama2c_loader.hpp"
#include "common/serving/sampler.hpp"
#include "common/serving/serve.hpp"
#include "common/model/synthetic_weights.hpp"
#include "tests/chapters/ch04_scenario.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

/// Chapter 4 over host memory against chapter 3 over host memory.
double shared_vs_unshared(const ModelWeights& w, DType kv, int block_size,
                          const std::vector<int>& pa, const std::vector<int>& pb, int steps) {
  CpuForward fwd(w);
  ch04::SharedCache shared(w.config, kv, 64, block_size, 101, /*read_once=*/true, Memory::kHost);
  ch03::PagedCache alone(w.config, kv, 64, block_size, 202, Memory::kHost);
  return test::shared_vs_unshared(fwd, shared, alone, w.config, block_size, pa, pb, steps);
}

TEST(Ch04CowPrefixSharing, SharedLogitsMatchUnsharedTiny) {
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 4);
  const std::vector<int> pa = {1, 5, 9, 2, 77, 31, 4, 8, 3, 12, 40};
  std::vector<int> pb(pa.begin(), pa.begin() + 8);
  pb.insert(pb.end(), {60, 61, 62});
  for (int bs : {1, 3, 4, 8})
    EXPECT_LE(shared_vs_unshared(w, DType::F32, bs, pa, pb, 10), 1e-5) << bs;
  EXPECT_LE(shared_vs_unshared(w, DType::BF16, 4, pa, pb, 6), 1e-5);
}

TEST(Ch04CowPrefixSharing, SharedLogitsMatchUnsharedStories260K) {
  KVHEAP_REQUIRE_MODEL(path, "stories260K.bin");
  const ModelWeights w = load_llama2c(path);
  const std::vector<int> pa = {1, 403, 407, 261, 378, 271, 420, 306, 422, 259, 267, 373, 10};
  std::vector<int> pb(pa.begin(), pa.begin() + 9);
  pb.insert(pb.end(), {280, 295});
  EXPECT_LE(shared_vs_unshared(w, DType::F32, 4, pa, pb, 24), 1e-5);
}

}  // namespace
}  // namespace kvheap
