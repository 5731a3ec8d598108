// bench_capacity: how many requests a fixed KV budget admits under max_seq_len reservation
// (chapters 1-2) and under paging (chapter 3), for block sizes 1 to 256.
//
// Requests: 100000 lengths (prompt + output) drawn from a lognormal distribution with mean 400
// tokens and sigma 1.0, clipped to [1, 4096]; the reservation policy reserves 4096 each. Model:
// Llama-3-8B in bf16 (128 KiB of KV per token); budget: 16 GiB. The numbers come from real
// allocations in a BlockManager, not from a formula.
#include <fmt/format.h>

#include "chapters/03_paged_blocks/capacity.hpp"

int main() {
  using namespace kvheap;
  const ModelConfig c = preset("llama-3-8b");
  const std::size_t budget = std::size_t{16} << 30;
  const int max_len = 4096;
  const auto lengths = ch03::lognormal_lengths(100000, 400.0, 1.0, max_len, 2024);
  fmt::print(
      "model {}, KV bf16 ({} KiB/token), budget {:.1f} GiB, requests lognormal mean 400, "
      "sigma 1.0, max {}\n\n",
      c.name, kv_bytes_per_token(c, DType::BF16) / 1024, budget / double(1 << 30), max_len);
  fmt::print(
      "| block size | admitted contiguous | admitted paged | paged / contiguous | waste contiguous "
      "% | waste paged % |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|\n");
  for (int bs : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    const ch03::CapacityResult r =
        ch03::admit_until_full(c, DType::BF16, budget, bs, max_len, lengths);
    fmt::print("| {} | {} | {} | {:.2f} | {:.1f} | {:.2f} |\n", bs, r.admitted_contiguous,
               r.admitted_paged, static_cast<double>(r.admitted_paged) / r.admitted_contiguous,
               100.0 * r.waste_contiguous, 100.0 * r.waste_paged);
  }
  return 0;
}
