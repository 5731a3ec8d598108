// bench_paged_attention_gpu: what paging costs decode attention on a GPU. The same batch is stored
// in chapter 2's per-sequence reservation and in chapter 3's block pool (block ids shuffled), and
// cuda::decode_attention and cuda::paged_attention run over each, side by side.
//
// Two parts, on Llama-3-8B's heads (32 query, 8 KV, head_dim 128) with a bf16 cache, one layer:
//   1. paged (block size 16) vs contiguous for batch {1, 8, 64} x context {1k, 4k, 16k}: time,
//      ratio (kvheap's goal: paged / contiguous <= 1.05), GB/s and the fraction of a
//      device-to-device copy peak measured in the same process.
//   2. a block-size sweep 1, 2, 4, ..., 256 over a batch of mixed context lengths: kernel time and
//      tail waste, written to PREFIX.md and PREFIX.csv (--sweep-out=PREFIX, default
//      block_size_sweep_gpu); scripts/plot_block_sweep.py plots the CSV.
//
// Beside the measured times the tables print the bandwidth roofline's prediction from the GPU's
// datasheet (bench/support/roofline_model.hpp), labelled as a model: both layouts must move the
// same bytes, so they share one. --model-only prints the model alone, on any machine.
//
// Each iteration times both layouts back to back (order alternating), flushing L2 (a read of twice
// its size, L2Flush) before each call, and the tables report medians. Contiguous slots reserve 32k
// positions each, as in bench_attention_gpu, and go to rows in shuffled order. Both layouts hold
// the same values and must give bitwise equal outputs before anything is timed.
//
// The simulator is not a performance model: in a KVHEAP_CUDA=sim build this program says so and
// times nothing (a listing, --benchmark_list_tests, still prints the names, and --model-only the
// model).
// (bench_paged_attention_cpu measures the CPU twin in every build.)
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/support/block_sweep.hpp"
#include "bench/support/failures.hpp"
#include "bench/support/gpu_start.hpp"
#include "bench/support/gpu_pair_timing.hpp"
#include "bench/support/roofline_model.hpp"
#include "common/measure/cuda/device_bandwidth.hpp"
#include "common/model/model_config.hpp"
#include "device/buffers.hpp"
#include "device/device.hpp"
#include "kernels/decode_attention.hpp"
#include "kernels/paged_attention.hpp"

namespace kvheap {
namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr std::size_t kRowBytes = static_cast<std::size_t>(kKvHeads) * kHeadDim * 2;  // bf16
constexpr long kMaxSeqLen = 32768;  // chapter 2's reservation per slot
constexpr DType kKv = DType::BF16;
constexpr int kBlockSize = 16;

double g_peak_gbps = 0.0;

/// One batch stored both ways on the device, with everything both kernels read.
struct Problem {
  std::vector<int> ctx;  // [n] positions each row attends over
  cuda::AttentionShape shape;
  DeviceBuffer<unsigned char> flat_k, flat_v;  // [n * kMaxSeqLen, kv_dim] bf16
  DeviceBuffer<std::int64_t> base_row;         // [n] slot * kMaxSeqLen, slots shuffled
  DeviceBuffer<unsigned char> pool_k, pool_v;  // [num_blocks * block_size, kv_dim] bf16
  DeviceBuffer<int> indptr, indices, last_page_len, row_seq;  // CSR page tables, see PagedLocator
  DeviceBuffer<int> n_ctx;                                    // [n]
  DeviceBuffer<float> q, out_c, out_p;                        // [n, n_heads, head_dim]
  PagedLocator loc;
};

/// Builds the problem, or returns an error message when it does not fit the free memory.
std::string make_problem(Problem& p, const std::vector<int>& ctx, int block_size) {
  const int n = static_cast<int>(ctx.size());
  const std::size_t slots = bench::slots_held(ctx, block_size);
  const std::size_t need = 2 * (static_cast<std::size_t>(n) * kMaxSeqLen + slots) * kRowBytes;
  std::size_t free_bytes = 0, total_bytes = 0;
  KVHEAP_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (need + (std::size_t{512} << 20) > free_bytes)
    return fmt::format("needs {:.1f} GB of KV, {:.1f} GB free", need / 1e9, free_bytes / 1e9);
  p.ctx = ctx;
  p.shape = {n, kHeads, kKvHeads, kHeadDim, *std::max_element(ctx.begin(), ctx.end())};
  p.flat_k = DeviceBuffer<unsigned char>(static_cast<std::size_t>(n) * kMaxSeqLen * kRowBytes);
  p.flat_v = DeviceBuffer<unsigned char>(p.flat_k.size());
  p.pool_k = DeviceBuffer<unsigned char>(slots * kRowBytes);
  p.pool_v = DeviceBuffer<unsigned char>(slots * kRowBytes);
  // Page tables as a shuffled pool hands them out: block ids permuted, taken in order.
  std::vector<int> ids(slots / block_size);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int> slot(n), indptr{0}, last, row_seq(n);
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), rng);
  std::iota(row_seq.begin(), row_seq.end(), 0);
  std::vector<std::int64_t> base(n);
  // Host rows for K and V, [max_ctx + n, kv_dim]: row i + t is what sequence i stores at t, so
  // every position of a sequence differs and sequences differ from each other. bf16 0x3c00..0x3cff:
  // finite values in [0.0078, 0.0156).
  std::vector<std::uint16_t> pattern[2];
  for (int kv = 0; kv < 2; ++kv) {
    pattern[kv].resize((static_cast<std::size_t>(p.shape.max_n_ctx) + n) * kRowBytes / 2);
    for (std::size_t e = 0; e < pattern[kv].size(); ++e)
      pattern[kv][e] = static_cast<std::uint16_t>(0x3c00 | (((e * 2654435761u + kv) >> 7) & 0xff));
  }
  for (int i = 0; i < n; ++i) {
    const int pages = (ctx[i] + block_size - 1) / block_size;
    indptr.push_back(indptr.back() + pages);
    last.push_back((ctx[i] - 1) % block_size + 1);
    base[i] = static_cast<std::int64_t>(slot[i]) * kMaxSeqLen;
    for (const bool is_v : {false, true}) {
      unsigned char* flat = (is_v ? p.flat_v : p.flat_k).data() + base[i] * kRowBytes;
      unsigned char* pool = (is_v ? p.pool_v : p.pool_k).data();
      const std::uint16_t* rows = pattern[is_v].data() + i * kRowBytes / 2;
      const std::size_t bytes = static_cast<std::size_t>(ctx[i]) * kRowBytes;
      KVHEAP_CUDA_CHECK(cudaMemcpy(flat, rows, bytes, cudaMemcpyHostToDevice));
      for (int b = 0; b < pages; ++b) {  // scatter the same rows into the sequence's blocks
        const int count = std::min(block_size, ctx[i] - b * block_size);
        const std::size_t page = static_cast<std::size_t>(ids[indptr[i] + b]);
        const std::size_t block_bytes = block_size * kRowBytes;
        KVHEAP_CUDA_CHECK(cudaMemcpyAsync(pool + page * block_bytes, flat + b * block_bytes,
                                          count * kRowBytes, cudaMemcpyDeviceToDevice));
      }
    }
  }
  p.indices = DeviceBuffer<int>::from_host(ids);
  p.indptr = DeviceBuffer<int>::from_host(indptr);
  p.last_page_len = DeviceBuffer<int>::from_host(last);
  p.row_seq = DeviceBuffer<int>::from_host(row_seq);
  p.base_row = DeviceBuffer<std::int64_t>::from_host(base);
  p.n_ctx = DeviceBuffer<int>::from_host(ctx);
  p.loc = PagedLocator{p.indptr.data(), p.indices.data(), p.last_page_len.data(), p.row_seq.data(),
                       block_size};
  const std::size_t q_elems = static_cast<std::size_t>(n) * kHeads * kHeadDim;
  p.q = DeviceBuffer<float>(q_elems);
  p.q.fill_bytes(0x3c);  // 0.0115 in every element: finite, the same for both layouts
  p.out_c = DeviceBuffer<float>(q_elems);
  p.out_p = DeviceBuffer<float>(q_elems);
  return {};
}

/// The problem of the benchmark now running, built once: Google Benchmark calls a function more
/// than once (a one-iteration trial, then the timed run). Only one is kept, to bound memory.
Problem* problem_for(benchmark::State& state, const std::vector<int>& ctx, int block_size) {
  static std::unique_ptr<Problem> kept;
  if (kept && kept->ctx == ctx && kept->loc.block_size == block_size) return kept.get();
  kept.reset();  // free first: two problems of this size may not fit side by side
  auto p = std::make_unique<Problem>();
  if (const std::string err = make_problem(*p, ctx, block_size); !err.empty()) {
    bench::fail(state, err);
    return nullptr;
  }
  kept = std::move(p);
  return kept.get();
}

/// Napkin math: every row reads K and V of its n_ctx positions for all KV heads,
/// sum(n_ctx) * 2 * n_kv_heads * head_dim * 2 B (bf16), plus q and out in fp32. Paging changes
/// where the rows lie, not how many bytes must move, so both layouts share this work.
bench::Work work_of(const std::vector<int>& ctx) {
  const double io = 2.0 * static_cast<double>(ctx.size()) * kHeads * kHeadDim * sizeof(float);
  return bench::attention_work(static_cast<double>(bench::tokens_of(ctx)), kHeads, kKvHeads,
                               kHeadDim, 2.0, io);
}
double bytes_moved(const Problem& p) { return work_of(p.ctx).bytes; }

struct Timing {
  double contiguous_ms = 0.0, paged_ms = 0.0;
  int splits = 0;
};

/// Verifies bitwise equality, then times both kernels in alternating pairs (medians).
Timing time_pair(benchmark::State& state, Problem& p) {
  cuda::AttentionWorkspace ws;
  Stream stream;
  auto contiguous = [&] {
    cuda::decode_attention(kKv, p.q.data(), p.flat_k.data(), p.flat_v.data(), p.n_ctx.data(),
                           p.base_row.data(), p.shape, p.out_c.data(), ws, stream);
  };
  auto paged = [&] {
    cuda::paged_attention(kKv, p.q.data(), p.pool_k.data(), p.pool_v.data(), p.n_ctx.data(), p.loc,
                          p.shape, p.out_p.data(), ws, stream);
  };
  contiguous();  // also the warm-up: grows the workspace, loads the module
  paged();
  if (p.out_c.to_host(stream) != p.out_p.to_host(stream)) {
    bench::fail(state, "paged output differs from contiguous: not timing a wrong answer");
    return {};
  }
  const bench::PairTiming t = bench::timed_pair(state, stream, contiguous, paged);
  return {t.a_ms, t.b_ms, cuda::detail::plan_attention(p.shape, 0).splits};
}

struct RatioRow {
  std::string config;
  double mb_moved = 0.0;
  Timing t;
  bench::Work work;
};
std::vector<RatioRow> g_ratio;
std::vector<bench::SweepRow> g_sweep;

void paged_vs_contiguous(benchmark::State& state, int batch, int ctx) {
  Problem* p = problem_for(state, std::vector<int>(batch, ctx), kBlockSize);
  if (p == nullptr) return;
  const Timing t = time_pair(state, *p);
  if (t.paged_ms == 0.0) return;
  state.counters["ratio"] = t.paged_ms / t.contiguous_ms;
  const RatioRow row{fmt::format("batch {}, ctx {}, bf16", batch, ctx), bytes_moved(*p) / 1e6, t,
                     work_of(p->ctx)};
  bench::keep_last(g_ratio, row,
                   [](const RatioRow& a, const RatioRow& b) { return a.config == b.config; });
}

const std::vector<int>& sweep_batch() {
  // 64 sequences of 256..8192 positions: about 1.1 GB of K and V in bf16.
  static const std::vector<int> ctx = bench::sweep_contexts(64, 256, 8192);
  return ctx;
}

void block_sweep(benchmark::State& state, int block_size) {
  Problem* p = problem_for(state, sweep_batch(), block_size);
  if (p == nullptr) return;
  const Timing t = time_pair(state, *p);
  if (t.paged_ms == 0.0) return;
  bench::SweepRow r;
  r.block_size = block_size;
  r.paged_ms = t.paged_ms;
  r.contiguous_ms = t.contiguous_ms;
  r.gbps = bytes_moved(*p) / (t.paged_ms * 1e-3) / 1e9;
  r.slots = bench::slots_held(p->ctx, block_size);
  r.tokens = bench::tokens_of(p->ctx);
  state.counters["ratio"] = t.paged_ms / t.contiguous_ms;
  state.counters["tail_waste_pct"] = 100.0 * r.tail_waste();
  bench::keep_last(g_sweep, r, [](const bench::SweepRow& a, const bench::SweepRow& b) {
    return a.block_size == b.block_size;
  });
}

constexpr int kBatches[] = {1, 8, 64};
constexpr int kContexts[] = {1024, 4096, 16384};

std::string ratio_name(int batch, int ctx) {
  return fmt::format("paged_vs_contiguous/bf16/batch{}/ctx{}", batch, ctx);
}

/// --model-only: the roofline's time for every configuration, on `gpu`, and nothing timed.
int print_model(const bench::GpuDatasheet& gpu) {
  fmt::print("bench_paged_attention_gpu: model only, nothing timed. {}\n\n",
             bench::model_note(&gpu, ""));
  fmt::print("| benchmark | MB moved | GFLOP | model us | bound |\n|---|---:|---:|---:|---|\n");
  auto row = [&](const std::string& name, const bench::Work& w) {
    fmt::print("| {} | {:.2f} | {:.3f} | {} | {} |\n", name, w.bytes / 1e6, w.fp32_flops / 1e9,
               bench::model_us(&gpu, w), bench::predict(w, gpu).bound);
  };
  for (int batch : kBatches)
    for (int ctx : kContexts) row(ratio_name(batch, ctx), work_of(std::vector<int>(batch, ctx)));
  // Every block size of the sweep moves the same bytes: the tails' empty slots are never read.
  for (int bs = 1; bs <= bench::kSweepMaxBlockSize; bs *= 2)
    row(fmt::format("block_sweep/bf16/bs{}", bs), work_of(sweep_batch()));
  return 0;
}

}  // namespace
}  // namespace kvheap

int main(int argc, char** argv) {
  using namespace kvheap;
  const std::string command = bench::command_line(argc, argv);
  const auto flags = bench::read_gpu_benchmark_flags("bench_paged_attention_gpu", argc, argv);
  if (!flags) return 2;
  bench::register_batch_by_context(kBatches, kContexts, ratio_name, paged_vs_contiguous);
  bench::register_block_sweep(block_sweep, benchmark::kMicrosecond, 0.2);
  const bench::GpuStart start =
      bench::start_gpu_benchmark("bench_paged_attention_gpu", flags->listing, flags->model,
                                 print_model, "bench_paged_attention_cpu");
  if (start.exit_code) return *start.exit_code;
  const std::string prefix = bench::flag_value(argc, argv, "sweep-out", "block_size_sweep_gpu");
  const DeviceInfo& info = start.info;
  const BandwidthSample& peak = start.peak;
  g_peak_gbps = peak.gbps;
  bench::run_benchmarks();

  const bench::GpuDatasheet* gpu = bench::model_gpu(flags->model, info.name);
  std::string md;
  if (!g_ratio.empty())
    md = fmt::format(
        "Paged vs contiguous attention, {} ({} SMs). Device-to-device copy peak: {:.0f} GB/s "
        "(read + write, {:.0f} MiB). Goal: paged / contiguous <= 1.05. {}\n\n"
        "| config | MB moved | contiguous us | paged us (bs {}) | model us | paged / model | "
        "paged / contiguous | contiguous GB/s | paged GB/s | paged % of copy peak | splits |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        info.name, info.sm_count, g_peak_gbps, static_cast<double>(peak.bytes) / (1 << 20),
        bench::model_note(gpu, info.name), kBlockSize);
  for (const RatioRow& r : g_ratio) {
    const double gc = r.mb_moved / r.t.contiguous_ms, gp = r.mb_moved / r.t.paged_ms;  // MB/ms
    md += fmt::format(
        "| {} | {:.2f} | {:.1f} | {:.1f} | {} | {} | {:.3f} | {:.0f} | {:.0f} | {:.1f} | {} "
        "|\n",
        r.config, r.mb_moved, 1e3 * r.t.contiguous_ms, 1e3 * r.t.paged_ms,
        bench::model_us(gpu, r.work), bench::measured_over_model(gpu, r.work, 1e-3 * r.t.paged_ms),
        r.t.paged_ms / r.t.contiguous_ms, gc, gp, 100.0 * gp / g_peak_gbps, r.t.splits);
  }
  // The sweep's table is shared with the CPU twin's; its model, the same at every block size, is
  // one sentence of the heading.
  std::string sweep_peak = fmt::format("Copy peak {:.0f} GB/s", g_peak_gbps);
  if (gpu != nullptr)
    sweep_peak += fmt::format(". Model (not a measurement; {} roofline): {} us at every block size",
                              gpu->name, bench::model_us(gpu, work_of(sweep_batch())));
  const int status =
      bench::finish_sweep(prefix, md, fmt::format("{} ({} SMs)", info.name, info.sm_count),
                          sweep_peak, sweep_batch(), command, g_sweep, 2 * kRowBytes);
  return bench::exit_status("bench_paged_attention_gpu", status);
}
