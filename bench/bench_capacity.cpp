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

#include "base/error.hpp"
#include "chapters/03_paged_blocks/capacity.hpp"
#include "common/program/cli.hpp"
#include "common/model/model_loader.hpp"

using namespace kvheap;

namespace {

constexpr int kLargestBlock = 256;
// The block pool at block size 1 has one block per token of budget, with 8 bytes of bookkeeping
// each (a free-list entry and a reference count) and 4 more in a page table once held: 2^27
// tokens keep that to about 1.5 GiB.
constexpr std::size_t kMaxTokens = std::size_t{1} << 27;
constexpr int kMaxRequests = 10'000'000;

/// The budget in bytes, checked against what the table needs: one block of the largest size,
/// and a pool of one-token blocks this program can hold.
std::size_t budget_bytes(double gib, const ModelConfig& c, DType kv) {
  if (!std::isfinite(gib) || gib <= 0)
    throw UsageError(fmt::format("--budget-gib must be a finite number > 0, got {}", gib));
  const std::size_t per_token = kv_bytes_per_token(c, kv);
  const double bytes = gib * static_cast<double>(std::int64_t{1} << 30);
  // Compared as a double first, so that no budget overflows the conversion to a byte count.
  if (bytes / static_cast<double>(per_token) > static_cast<double>(kMaxTokens))
    throw UsageError(fmt::format(
        "--budget-gib {} holds {:.0f} tokens of {} KV in {}; the block-size-1 pool supports at "
        "most {} (2^27) tokens: give a smaller budget",
        gib, bytes / static_cast<double>(per_token), dtype_name(kv), c.name, kMaxTokens));
  const auto budget = static_cast<std::size_t>(bytes);
  // Counted from the whole bytes, as the pool will count them.
  if (budget / per_token < static_cast<std::size_t>(kLargestBlock))
    throw UsageError(fmt::format(
        "--budget-gib {} holds {} tokens of {} KV in {} ({} B each), fewer than one block of {} "
        "tokens, the largest block size in the table",
        gib, budget / per_token, dtype_name(kv), c.name, per_token, kLargestBlock));
  return budget;
}

/// The lognormal's parameters, checked here to name the flags.
void check_lengths(double mean, double sigma) {
  if (!std::isfinite(mean) || mean <= 0)
    throw UsageError(fmt::format("--mean must be a finite number of tokens > 0, got {}", mean));
  if (!std::isfinite(sigma) || sigma <= 0)
    throw UsageError(fmt::format("--sigma must be a finite number > 0, got {}", sigma));
}

/// The ratio cell. A policy that admitted every request might have admitted more, so its count
/// only bounds what the budget holds: paging's from below (the ratio is at least this), the
/// reservation's from above (at most this); when both did, or the reservation admitted none,
/// there is no ratio to give.
std::string ratio_cell(const ch03::CapacityResult& r, int requests) {
  const bool paged_all = r.admitted_paged == requests;
  const bool contiguous_all = r.admitted_contiguous == requests;
  if (r.admitted_contiguous == 0 || (paged_all && contiguous_all)) return "-";
  const double ratio = static_cast<double>(r.admitted_paged) / r.admitted_contiguous;
  return fmt::format("{}{:.2f}", paged_all ? ">=" : contiguous_all ? "<=" : "", ratio);
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
  cli.option("--model", model,
             "Preset name, fetched model (smollm2), llama2.c .bin file, GGUF file or safetensors "
             "folder")
      .show_default();
  cli.option("--kv-dtype", kv_dtype, "fp32, fp16 or bf16").show_default();
  cli.option("--budget-gib", budget_gib, "KV budget in GiB").show_default();
  cli.option("--requests", requests, "Request lengths drawn, admitted in order").show_default();
  cli.option("--mean", mean, "Mean request length in tokens (lognormal)").show_default();
  cli.option("--sigma", sigma, "Sigma of the lognormal's underlying normal").show_default();
  const Flag max_len_flag =
      cli.option("--max-len", max_len,
                 "Longest request, and what reservation reserves (default: 4096, or the model's "
                 "context if shorter)");
  cli.option("--seed", seed, "Seed of the request lengths").show_default();

  return run_cli(cli, argc, argv, [&] {
    const DType kv = parse_dtype(kv_dtype);
    const ModelConfig c = is_preset(model) ? preset(model) : load_model(model).config;
    const std::size_t budget = budget_bytes(budget_gib, c, kv);
    max_len = resolve_max_len(max_len_flag, max_len, c);
    if (requests < 1 || requests > kMaxRequests)
      throw UsageError(
          fmt::format("--requests must be in [1, {}], got {}", kMaxRequests, requests));
    check_lengths(mean, sigma);
    const auto lengths = ch03::lognormal_lengths(requests, mean, sigma, max_len, seed);
    fmt::print(
        "model {}, KV {} ({} B/token), budget {} GiB, {} requests lognormal mean {}, sigma "
        "{}, max {} (seed {})\n\n",
        c.name, dtype_name(kv), kv_bytes_per_token(c, kv), budget_gib, requests, mean, sigma,
        max_len, seed);
    fmt::print(
        "| block size | admitted contiguous | admitted paged | paged / contiguous | waste "
        "contiguous % | waste paged % |\n");
    fmt::print("|---:|---:|---:|---:|---:|---:|\n");
    bool bounded = false, none_reserved = false;
    for (int bs = 1; bs <= kLargestBlock; bs *= 2) {
      const ch03::CapacityResult r = ch03::admit_until_full(c, kv, budget, bs, max_len, lengths);
      bounded = bounded || r.admitted_paged == requests || r.admitted_contiguous == requests;
      none_reserved = none_reserved || r.admitted_contiguous == 0;
      fmt::print("| {} | {} | {} | {} | {:.1f} | {:.2f} |\n", bs, r.admitted_contiguous,
                 r.admitted_paged, ratio_cell(r, requests), 100.0 * r.waste_contiguous,
                 100.0 * r.waste_paged);
    }
    if (bounded)
      fmt::print(
          "\nA policy admitted all {} requests before its budget was full, so its count is only a "
          "bound: >= marks a ratio that is at least that (paging ran out of requests), <= one "
          "that is at most that (reservation did), - one where both did. Give more --requests.\n",
          requests);
    if (none_reserved)
      fmt::print(
          "\nReservation admitted none: the budget holds less than one reservation of {} "
          "positions, so there is no ratio (-).\n",
          max_len);
  });
}
