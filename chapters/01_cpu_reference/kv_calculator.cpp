// ch01_kv_calculator: KV-cache napkin math for a model, a dtype, a context length and a memory
// size.
//
// Prints bytes per token, cache per sequence, cache versus weights, and how many sequences fit
// when each reserves max_seq_len (chapter 1's policy) versus only what it needs (chapter 3's).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "base/error.hpp"
#include "common/program/cli.hpp"
#include "common/program/options.hpp"

using namespace kvheap;

namespace {

// A petabyte: far beyond any accelerator, and small enough that the sequence counts below stay
// exact in a 64-bit integer (1e15 bytes over at least 8 KV bytes per token).
constexpr double kMaxMemoryGb = 1e6;

void check_memory_gb(double memory_gb) {
  if (!std::isfinite(memory_gb) || memory_gb <= 0 || memory_gb > kMaxMemoryGb)
    throw UsageError(
        fmt::format("--memory-gb must be a finite number in (0, {:.0f}] (a petabyte), got {}",
                    kMaxMemoryGb, memory_gb));
}

// Without --context, a quarter of the context, but at least one token so that models with a
// max_seq_len below 4 get a valid default too. An explicit --context is checked as given.
long resolve_context(const Flag& flag, long context, const ModelConfig& c) {
  if (!flag.given()) return std::max(1, c.max_seq_len / 4);
  if (context < 1 || context > c.max_seq_len)
    throw UsageError(
        fmt::format("--context must be in [1, max_seq_len = {}], got {}", c.max_seq_len, context));
  return context;
}

}  // namespace

int main(int argc, char** argv) {
  CommandLine cli{"kvheap KV-cache calculator", "ch01_kv_calculator"};
  std::string model = "llama-3-8b";
  std::string kv_dtype = "bf16";
  std::string weight_dtype = "bf16";
  long context = 0;
  double memory_gb = 80.0;
  bool list = false;
  cli.option("--model", model,
             "Preset name, fetched model (smollm2), llama2.c .bin file, GGUF file or safetensors "
             "folder")
      .show_default();
  cli.option("--kv-dtype", kv_dtype, "fp32, fp16 or bf16").show_default();
  cli.option("--weight-dtype", weight_dtype, "fp32, fp16 or bf16").show_default();
  const Flag context_flag = cli.option(
      "--context", context, "Tokens each sequence actually holds (default max_seq_len/4)");
  cli.option("--memory-gb", memory_gb, "Accelerator memory in GB (1e9 bytes)").show_default();
  cli.flag("--list-presets", list, "Print every preset's configuration and exit");

  return run_cli(cli, argc, argv, [&] {
    if (list) {
      for (const auto& n : preset_names()) std::cout << describe(preset(n)) << "\n";
      return;
    }
    const DType kv = parse_dtype(kv_dtype);
    const DType wt = parse_dtype(weight_dtype);
    check_memory_gb(memory_gb);
    const ModelConfig c = model_config_of(model);
    context = resolve_context(context_flag, context, c);

    const double memory = memory_gb * 1e9;
    const double weights = static_cast<double>(weight_bytes(c, wt));
    const double per_token = static_cast<double>(kv_bytes_per_token(c, kv));
    const double reserved = per_token * c.max_seq_len;  // chapter 1: max_seq_len per sequence
    const double needed = per_token * static_cast<double>(context);
    const double kv_memory = memory - weights;

    std::cout << describe(c) << "\n";
    fmt::print("KV bytes per token ({}): 2 x {} layers x {} kv heads x {} dims x {} B = {} B\n",
               dtype_name(kv), c.n_layers, c.n_kv_heads, c.head_dim, dtype_size(kv), per_token);
    fmt::print("cache per sequence at {} tokens: {:.3f} MB   (at max_seq_len {}: {:.3f} MB)\n",
               context, needed / 1e6, c.max_seq_len, reserved / 1e6);
    fmt::print("weights ({}): {:.3f} GB; one full-context sequence's cache is {:.1f} % of that\n",
               dtype_name(wt), weights / 1e9, 100.0 * reserved / weights);
    if (kv_memory <= 0)  // no sequence fits: the question has no answer, and the run says so
      throw ResourceError(fmt::format(
          "--memory-gb {:g} does not even hold the weights ({:.6g} GB); give more than that",
          memory_gb, weights / 1e9));
    const long fit_reserved = static_cast<long>(kv_memory / reserved);
    const long fit_exact = static_cast<long>(kv_memory / needed);
    fmt::print("memory {:.1f} GB - weights = {:.3f} GB for KV\n", memory_gb, kv_memory / 1e9);
    fmt::print("sequences that fit, reserving max_seq_len : {}\n", fit_reserved);
    fmt::print("sequences that fit, storing exactly {} tokens: {}  ({:.1f}x)\n", context, fit_exact,
               fit_reserved > 0 ? static_cast<double>(fit_exact) / fit_reserved : 0.0);
  });
}
