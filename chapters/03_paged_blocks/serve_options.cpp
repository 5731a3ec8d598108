#include "chapters/03_paged_blocks/serve_options.hpp"

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/model_config.hpp"

namespace kvheap::ch03 {

void add_serve_options(CLI::App& app, ServeOptions& p, const std::string& num_seqs_help) {
  app.add_option("--block-size", p.block_size, "Token slots per block")->capture_default_str();
  app.add_option("--num-seqs", p.num_seqs, num_seqs_help)->capture_default_str();
  app.add_option("--prompts", p.prompts_file,
                 "File with one prompt per line (ids, or text with --tokenizer)")
      ->excludes(app.get_option("--num-seqs"))
      ->excludes(app.get_option("--prompt"))
      ->excludes(app.get_option("--prompt-ids"));
  app.add_option("--weight-dtype", p.weight_dtype, "Weights on the device: fp32, fp16 or bf16")
      ->capture_default_str();
  app.add_option("--shuffle-seed", p.shuffle_seed,
                 "Order of the free list; 0 hands out blocks in order")
      ->capture_default_str();
  app.add_flag("--no-peak", p.no_peak, "Skip measuring the bandwidth peak at start");
}

void check_serve_options(const CommonOptions& o, const ServeOptions& p) {
  if (o.device != "cpu" && o.device != "cuda")
    throw UsageError(fmt::format("--device {}: expected cpu or cuda", o.device));
  if (p.block_size <= 0)
    throw UsageError(fmt::format("--block-size must be positive, got {}", p.block_size));
  if (o.device == "cpu" && parse_dtype(p.weight_dtype) != DType::F32)
    throw UsageError(
        fmt::format("--weight-dtype {} needs --device cuda: the CPU backend computes "
                    "with fp32 weights",
                    p.weight_dtype));
}

}  // namespace kvheap::ch03
