#include "common/serve_options.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "common/model_config.hpp"

namespace kvheap {

void add_serve_options(CommandLine& cli, ServeOptions& p, const std::string& num_seqs_help) {
  cli.option("--block-size", p.block_size, "Token slots per block").show_default();
  cli.option("--num-seqs", p.num_seqs, num_seqs_help).show_default();
  cli.option("--prompts", p.prompts_file,
             "File with one prompt per line (ids, or text with --tokenizer)")
      .excludes(cli.get("--num-seqs"))
      .excludes(cli.get("--prompt"))
      .excludes(cli.get("--prompt-ids"));
  cli.option("--weight-dtype", p.weight_dtype, "Weights on the device: fp32, fp16 or bf16")
      .show_default();
  cli.option("--shuffle-seed", p.shuffle_seed,
             "Order of the free list; 0 hands out blocks in order")
      .show_default();
  cli.flag("--no-peak", p.no_peak, "Skip measuring the bandwidth peak at start");
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

}  // namespace kvheap
