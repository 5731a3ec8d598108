// Admission with sharing: how many blocks a request can take at most, counting what it will share.
//
// Chapter 3 admits a sequence when the pool can hold its worst case. With sharing, that worst case
// shrinks twice: the prompt's full blocks that an earlier prompt already fills are taken from the
// prefix index, and the --samples forks of one prompt share all of its full blocks. What each
// sample can still take alone is everything after them:
//
//   need = (full prompt blocks - reused) + samples x (blocks_for(prompt + new - 1) - full prompt
//   blocks)
//
// The second term holds each sample's copy of the prompt's last, partly filled block
// (copy-on-write) and the blocks its generated tokens fill.
#pragma once

#include <span>
#include <vector>

namespace kvheap::ch04 {

/// \brief Leading full blocks of `block_size` tokens that `a` and `b` hold alike.
[[nodiscard]] long common_full_blocks(std::span<const int> a, std::span<const int> b,
                                      int block_size);

/// \brief What admitting one request commits.
struct RequestPlan {
  long reused_blocks = 0;  ///< prompt blocks the prefix index will supply
  long need = 0;           ///< blocks it can take at most, beyond those
};

/// \brief The plan of a request whose prompt is `prompt`, forked into `samples` sequences that each
/// generate up to `max_new_tokens`, admitted after the prompts `earlier` (whose full blocks the
/// prefix index will hold by the time this one is prefilled). The last prompt token is always
/// computed, so at most (prompt.size() - 1) / block_size blocks are reused.
[[nodiscard]] RequestPlan plan_request(std::span<const int> prompt,
                                       const std::vector<std::vector<int>>& earlier, int samples,
                                       int max_new_tokens, int block_size);

}  // namespace kvheap::ch04
