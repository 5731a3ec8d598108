#include "chapters/03_paged_blocks/block_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

#include "base/error.hpp"

namespace kvheap::ch03 {

BlockPool::BlockPool(int num_blocks, int block_size, std::uint64_t shuffle_seed)
    : block_size_(block_size) {
  if (block_size <= 0)
    throw UsageError(fmt::format("--block-size must be positive, got {}", block_size));
  if (num_blocks <= 0)
    throw ResourceError(fmt::format("a block pool needs at least one block, got {}", num_blocks));
  ref_count_.assign(num_blocks, 0);
  free_.resize(num_blocks);
  // Reversed so that an unshuffled pool hands out 0, 1, 2, ... (easy to read in a pool map).
  std::iota(free_.rbegin(), free_.rend(), 0);
  if (shuffle_seed != 0) {
    std::mt19937_64 rng(shuffle_seed);
    std::shuffle(free_.begin(), free_.end(), rng);
  }
}

void BlockPool::check_id(int block, const char* what) const {
  if (block < 0 || block >= num_blocks())
    throw InputError(
        fmt::format("{}: block id {} is outside the pool of {} blocks", what, block, num_blocks()));
}

long BlockPool::blocks_for(long num_tokens) const {
  if (num_tokens < 0)
    throw InputError(
        fmt::format("a sequence cannot hold {} tokens: expected a count of 0 or more", num_tokens));
  return num_tokens / block_size_ + (num_tokens % block_size_ != 0 ? 1 : 0);  // ceil, no overflow
}

int BlockPool::allocate() {
  if (free_.empty())
    throw ResourceError(fmt::format("block pool exhausted: all {} blocks of {} slots are in use",
                                    num_blocks(), block_size_));
  const int b = free_.back();
  free_.pop_back();
  ref_count_[b] = 1;
  return b;
}

void BlockPool::retain(int block) {
  check_id(block, "retain");
  if (ref_count_[block] == 0)
    throw InputError(
        fmt::format("retain: block {} is free; only used blocks can be shared", block));
  ++ref_count_[block];
}

void BlockPool::release(int block) {
  check_id(block, "release");
  if (ref_count_[block] == 0)
    throw InputError(fmt::format("release: block {} is already free (double free)", block));
  if (--ref_count_[block] == 0) free_.push_back(block);
}

int BlockPool::ref_count(int block) const {
  check_id(block, "ref_count");
  return ref_count_[block];
}

void BlockPool::check_invariants() const {
  std::vector<char> listed(ref_count_.size(), 0);
  for (int b : free_) {
    if (b < 0 || b >= num_blocks())
      throw std::logic_error(
          fmt::format("free list holds block id {}, outside the pool of {}", b, num_blocks()));
    if (listed[b]++ != 0) throw std::logic_error(fmt::format("block {} is listed free twice", b));
    if (ref_count_[b] != 0)
      throw std::logic_error(
          fmt::format("block {} is listed free with reference count {}", b, ref_count_[b]));
  }
  for (int b = 0; b < num_blocks(); ++b)
    if (ref_count_[b] == 0 && listed[b] == 0)
      throw std::logic_error(fmt::format("block {} has no references but is not listed free", b));
}

}  // namespace kvheap::ch03
