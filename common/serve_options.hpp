// The flags every multi-sequence chapter (3, 4 and 5) takes beside the common ones: how big a
// block is, which prompts to serve, the weights' dtype on the device, and the pool's order.
#pragma once

#include <cstdint>
#include <string>

#include "common/cli.hpp"

namespace kvheap {

/// \brief The serving flags' values.
struct ServeOptions {
  int block_size = 16;                ///< --block-size: token slots per block
  int num_seqs = 1;                   ///< --num-seqs: copies of the prompt to serve
  std::string prompts_file;           ///< --prompts: one prompt per line
  std::string weight_dtype = "fp32";  ///< --weight-dtype: weights on the device
  std::uint64_t shuffle_seed = 1;     ///< --shuffle-seed: order of the free list (0: in order)
  bool no_peak = false;               ///< --no-peak: skip measuring the bandwidth peak
};

/// \brief Registers the serving flags on `cli`; `--prompts` excludes --num-seqs, --prompt and
/// --prompt-ids (flags that would be silently ignored together are refused together).
/// `num_seqs_help` says what --num-seqs counts in this chapter.
void add_serve_options(CommandLine& cli, ServeOptions& p, const std::string& num_seqs_help);

/// \brief Checks what the parser cannot: --device is cpu or cuda, --block-size is positive, and
/// weights other than fp32 are asked of the device only. Throws UsageError naming the flag.
void check_serve_options(const CommonOptions& o, const ServeOptions& p);

}  // namespace kvheap
