// bench_capacity: how many requests a fixed KV budget admits under max_seq_len reservation
// (chapters 1-2) and under paging (chapter 3), for block sizes 1 to 256.
//
// By default: 100000 request lengths (prompt + output) drawn from a lognormal distribution with
// mean 400 tokens and sigma 1.0, clipped to [1, 4096], which the reservation policy reserves for
// each; Llama-3-8B in bf16 (128 KiB of KV per token); a 16 GiB budget. Every one of these is a
// flag, so the same question can be asked of another model, dtype, budget or workload. The
// numbers come from real allocations in a BlockManager, not from a formula.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "chapters/03_paged_blocks/capacity.hpp"
#include "common/cli.hpp"
#include "common/error.hpp"
#include "common/model_loader.hpp"

using namespace kvheap;

namespace {

constexpr int kLargestBlock = 256;
// The block pool at block size 1 has one block per token of budget, with 8 bytes of bookkeeping
// each (a free-list entry and a reference count): 2^27 tokens keep that to 1 GiB.
constexpr double kMaxTokens = static_cast<double>(std::int64_t{1} << 27);
constexpr int kMaxRequests = 10'000'000;

/// The budget in bytes, checked against what the table needs: one block of the largest size,
/// and a pool of one-token blocks this program can hold.
std::size_t budget_bytes(double gib, const ModelConfig& c, DType kv) {
  if (!std::isfinite(gib) || gib <= 0)
    throw UsageError(fmt::format("--budget-gib must be a finite number > 0, got {}", gib));
  const double per_token = static_cast<double>(kv_bytes_per_token(c, kv));
  const double tokens = gib * static_cast<double>(std::int64_t{1} << 30) / per_token;
  if (tokens < kLargestBlock)
    throw UsageError(fmt::format(
        "--budget-gib {} holds {:.0f} tokens of {} KV in {} ({} B each), fewer than one block of "
        "{} tokens, the largest block size in the table",
        gib, tokens, dtype_name(kv), c.name, per_token, kLargestBlock));
  if (tokens > kMaxTokens)
    throw UsageError(fmt::format(
        "--budget-gib {} holds {:.0f} tokens of {} KV in {}; the block-size-1 pool supports at "
        "most {:.0f} (2^27) tokens: give a smaller budget",
        gib, tokens, dtype_name(kv), c.name, kMaxTokens));
  return static_cast<std::size_t>(gib * static_cast<double>(std::int64_t{1} << 30));
}

/// --max-len: each request's longest length and the reservation per request; without the flag,
/// 4096 or the model's context if that is shorter.
int resolve_max_len(const Flag& flag, int max_len, const ModelConfig& c) {
  if (!flag.given()) return std::min(4096, c.max_seq_len);
  if (max_len < 1 || max_len > c.max_seq_len)
    throw UsageError(fmt::format("--max-len must be in [1, max_seq_len = {}] for {}, got {}",
                                 c.max_seq_len, c.name, max_len));
  return max_len;
}

}  // namespace

int main(int argc, char** argv) {
  CommandLine cli{"Requests a fixed KV budget admits: reservation vs paging, block sizes 1..256",
                  "bench_capacity"};
  std::string model = "llama-3-8b";
  std::string kv_dtype = "bf16";
  double budget_gib = 16.0;
  int requests = 100000;
  double mean = 400.0;
  double sigma = 1.0;
  int max_len = 0;
  std::uint64_t seed = 2024;
  cli.option("--model", model, "Preset name, llama2.c .bin file or safetensors folder")
      .show_default();
  cli.option("--kv-dtype", kv_dtype, "fp32, fp16 or bf16").show_default();
  cli.option("--budget-gib", budget_gib, "KV budget in GiB").show_default();
  cli.option("--requests", requests, "Request lengths drawn, admitted in order").show_default();
  cli.option("--mean", mean, "Mean request length in tokens (lognormal)").show_default();
  cli.option("--sigma", sigma, "Sigma of the lognormal's underlying normal").show_default();
  const Flag max_len_flag = cli.option(
      "--max-len", max_len, "Longest request, and what reservation reserves (default 4096)");
  cli.option("--seed", seed, "Seed of the request lengths").show_default();

  return run_cli(cli, argc, argv, [&] {
    const DType kv = parse_dtype(kv_dtype);
    const ModelConfig c = is_preset(model) ? preset(model) : load_model(model).config;
    const std::size_t budget = budget_bytes(budget_gib, c, kv);
    max_len = resolve_max_len(max_len_flag, max_len, c);
    if (requests < 1 || requests > kMaxRequests)
      throw UsageError(
          fmt::format("--requests must be in [1, {}], got {}", kMaxRequests, requests));
    const auto lengths = ch03::lognormal_lengths(requests, mean, sigma, max_len, seed);
    fmt::print(
        "model {}, KV {} ({} B/token), budget {:.3g} GiB, {} requests lognormal mean {}, sigma "
        "{}, max {} (seed {})\n\n",
        c.name, dtype_name(kv), kv_bytes_per_token(c, kv), budget_gib, requests, mean, sigma,
        max_len, seed);
    fmt::print(
        "| block size | admitted contiguous | admitted paged | paged / contiguous | waste "
        "contiguous % | waste paged % |\n");
    fmt::print("|---:|---:|---:|---:|---:|---:|\n");
    bool all_admitted = false;
    for (int bs = 1; bs <= kLargestBlock; bs *= 2) {
      const ch03::CapacityResult r = ch03::admit_until_full(c, kv, budget, bs, max_len, lengths);
      // A budget below one reservation admits nothing contiguous: no ratio to give.
      const std::string ratio =
          r.admitted_contiguous > 0
              ? fmt::format("{:.2f}", static_cast<double>(r.admitted_paged) / r.admitted_contiguous)
              : std::string("-");
      const bool all = r.admitted_paged == requests;
      all_admitted = all_admitted || all;
      fmt::print("| {} | {} | {} | {}{} | {:.1f} | {:.2f} |\n", bs, r.admitted_contiguous,
                 r.admitted_paged, ratio, all ? "*" : "", 100.0 * r.waste_contiguous,
                 100.0 * r.waste_paged);
    }
    if (all_admitted)
      fmt::print(
          "\n* paging admitted every request before the budget was full: the ratio is a lower "
          "bound; give more --requests\n");
  });
}
