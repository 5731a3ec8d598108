// The program every chapter builds, and what a chapter's main supplies to it.
//
// run_chapter() does what every chapter does alike: the shared flags, the model and tokenizer,
// the requests (--prompts FILE or --num-seqs copies of one prompt), the backend for --device, the
// serving loop, and the report (text, or one JSON object with --json). With --self-check it runs
// the chapter on the tiny model instead and compares every request's greedy ids with the
// reference forward pass, printing "Disposition: Passed" or "Failed". A chapter's main says what
// is its own: its flags and its policy.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/forward/backend.hpp"
#include "common/program/cli.hpp"
#include "common/model/model_config.hpp"
#include "common/serving/serve.hpp"

namespace kvheap {

/// \brief What a chapter's policy is built from.
struct Run {
  const CommonOptions& options;          ///< the shared flags, as parsed
  const ModelConfig& config;             ///< the model
  Backend& backend;                      ///< the forward pass and the memory caches live in
  DType kv;                              ///< --kv-dtype
  std::size_t budget_cap;                ///< --kv-budget-mb in bytes (0: no cap)
  const std::vector<Request>& requests;  ///< what will be served
  long longest;                          ///< positions the longest request stores at most
};

/// \brief A chapter program: its name, its defaults, its own flags and its policy.
struct Chapter {
  std::string name;   ///< the folder's name, "03_paged_blocks"; the program is ch03_paged_blocks
  std::string title;  ///< the first line of --help
  int default_num_seqs = 1;  ///< --num-seqs when not given
  std::string num_seqs_help = "Requests to serve (copies of the prompt)";  ///< its --help
  std::string default_device = "cpu";  ///< "auto" (chapter 2) also accepts --device auto
  bool cpu_only = false;               ///< --device cuda is a usage error (chapter 1)
  /// The KV cache reserves host memory as it admits (chapter 1): a --kv-budget-mb past the host's
  /// physical memory is a promise the cache would break mid-run, so it is refused before the
  /// model is loaded.
  bool kv_in_host_memory = false;
  /// With one request, the JSON keeps prompt_ids, generated_ids and text at its top, as chapters
  /// 1 and 2 printed them when they served one sequence; several requests get "sequences".
  bool one_request_flat = false;

  /// \brief Registers the chapter's own flags.
  std::function<void(CommandLine&)> add_flags;
  /// \brief Checks the chapter's own flags (UsageError), before the model is loaded.
  std::function<void(const CommonOptions&)> check_flags;
  /// \brief Turns the requests into the ones the chapter serves (chapter 4 adds forks); the
  /// sampler seeds are set afterwards, the flag's seed plus the request's index.
  std::function<void(std::vector<Request>&)> shape_requests;
  /// \brief The chapter's policy for a run: its admission and the cache it plans over.
  std::function<std::unique_ptr<ServingPolicy>(const Run&)> make_policy;
  /// \brief Called after each step of the serving loop, with the steps done.
  std::function<void(long)> after_step;
  /// \brief Sets the chapter's own flags for --self-check, so that it exercises the chapter's
  /// idea (a budget that preempts, blocks that are shared).
  std::function<void(CommonOptions&)> configure_self_check;
};

/// \brief Runs `chapter` with the command line `argv` and returns the exit status: 0, 2 for a
/// usage error, 1 for bad input or an exhausted resource (and a failed self-check), 77 when the
/// self-check's device is missing (ctest's skip).
int run_chapter(const Chapter& chapter, int argc, char** argv);

}  // namespace kvheap
