// bench_attention_gpu: chapter 2's decode-attention kernel on the contiguous cache, against a
// device-to-device copy measured in the same process.
//
// Decode attention is a streaming read: every row reads K and V of all its cached positions once
// and does a few flops per byte. Its GB/s over the copy's GB/s says how close the kernel gets to
// what the memory system can deliver. Shapes are Llama-3-8B's (32 query heads, 8 KV heads,
// head_dim 128) with a bf16 cache, one layer.
//
// Beside each measured time the table prints the bandwidth roofline's prediction from the GPU's
// datasheet (bench/support/roofline_model.hpp), labelled as a model; --model-only prints that model
// alone, for every configuration, on any machine (--model-gpu=KEY picks the datasheet, h200 by
// default).
//
// Cold-cache numbers: each slot reserves the full 32k positions, so one sequence's K sits 64 MiB
// from the next's; slots are assigned to rows in shuffled order; and L2 is flushed before every
// timed call by a read of twice its size (L2Flush), so small configurations are not served from
// L2 and no call pays for another's write-backs.
//
// The simulator is not a performance model: in a KVHEAP_CUDA=sim build this program says so and
// times nothing (a listing, --benchmark_list_tests, still prints the names, and --model-only the
// model). (The CPU twin has
// its own benchmark, bench_attention_cpu, in every build.)
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/support/command.hpp"
#include "bench/support/failures.hpp"
#include "bench/support/gpu_start.hpp"
#include "bench/support/roofline_model.hpp"
#include "bench/support/rows.hpp"
#include "common/measure/cuda/device_bandwidth.hpp"
#include "common/measure/cuda/l2_flush.hpp"
#include "common/model/model_config.hpp"
#include "device/buffers.hpp"
#include "device/device.hpp"
#include "kernels/decode_attention.hpp"

namespace kvheap {
namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr int kMaxSeqLen = 32768;  // every slot's reservation, whatever its context
constexpr DType kKv = DType::BF16;

double g_peak_gbps = 0.0;

/// The configurations, in the order they are registered and tabulated.
constexpr int kBatches[] = {1, 8, 64};
constexpr int kContexts[] = {1024, 4096, 16384, 32768};

std::string bench_name(int batch, int ctx) {
  return fmt::format("decode_attention/llama3_8b_bf16/batch{}/ctx{}", batch, ctx);
}

/// Napkin math: every row reads K and V of n_ctx positions for all KV heads,
/// n * n_ctx * 2 * n_kv_heads * head_dim * 2 B (bf16), plus q and out in fp32; the split-K
/// workspace traffic is the kernel's own overhead and is not counted as useful bytes.
bench::Work work_of(int batch, int ctx) {
  const double io = 2.0 * batch * kHeads * kHeadDim * 4.0;
  return bench::attention_work(static_cast<double>(batch) * ctx, kHeads, kKvHeads, kHeadDim, 2.0,
                               io);
}

struct Row {
  std::string config;
  double budget_mb, mb_moved, us, gbps;
  int splits;
  bench::Work work;
};
std::vector<Row> g_rows;

void decode_attention_bench(benchmark::State& state, int batch, int ctx) {
  const std::size_t kv_dim = static_cast<std::size_t>(kKvHeads) * kHeadDim;
  // Bytes of K (or of V): batch slots of kMaxSeqLen positions, bf16.
  const std::size_t cache_bytes = static_cast<std::size_t>(batch) * kMaxSeqLen * kv_dim * 2;
  L2Flush flush(device_l2_bytes());  // allocated first, so the check below counts it as used
  std::size_t free_bytes = 0, total_bytes = 0;
  KVHEAP_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (2 * cache_bytes + (256u << 20) > free_bytes) {
    bench::fail(state, fmt::format("needs {:.1f} GB of KV reservation, {:.1f} GB free",
                                   2.0 * cache_bytes / 1e9, free_bytes / 1e9));
    return;
  }
  DeviceBuffer<unsigned char> k(cache_bytes), v(cache_bytes);
  k.fill_bytes(0x3c);  // bf16 0x3c3c = 0.0115: finite values; the kernel has no data-dependent path
  v.fill_bytes(0x3c);
  const std::size_t q_elems = static_cast<std::size_t>(batch) * kHeads * kHeadDim;
  DeviceBuffer<float> q(q_elems), out(q_elems);
  q.fill_bytes(0x3c);

  std::vector<int> slots(batch);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), std::mt19937(42));
  std::vector<std::int64_t> base(batch);
  for (int i = 0; i < batch; ++i) base[i] = static_cast<std::int64_t>(slots[i]) * kMaxSeqLen;
  const auto base_row = DeviceBuffer<std::int64_t>::from_host(base);
  const auto n_ctx = DeviceBuffer<int>::from_host(std::vector<int>(batch, ctx));

  const cuda::AttentionShape shape{batch, kHeads, kKvHeads, kHeadDim, ctx};
  cuda::AttentionWorkspace ws;
  Stream stream;
  Event start, stop;
  auto run = [&] {
    cuda::decode_attention(kKv, q.data(), k.data(), v.data(), n_ctx.data(), base_row.data(), shape,
                           out.data(), ws, stream);
  };
  run();  // warm-up: grows the workspace, loads the module
  double total_ms = 0.0;
  for (auto _ : state) {
    flush(stream);
    start.record(stream);
    run();
    stop.record(stream);
    const double ms = elapsed_ms(start, stop);
    total_ms += ms;
    state.SetIterationTime(ms * 1e-3);
  }
  const bench::Work work = work_of(batch, ctx);
  const double bytes = work.bytes;
  const double us = total_ms * 1e3 / static_cast<double>(state.iterations());
  const double gbps = bytes / (us * 1e-6) / 1e9;
  const int splits = cuda::detail::plan_attention(shape, 0).splits;
  state.counters["GBps"] = gbps;
  state.counters["frac_of_copy_peak"] = gbps / g_peak_gbps;
  state.counters["splits"] = splits;
  const std::string config = fmt::format("batch {}, ctx {}, bf16", batch, ctx);
  state.SetLabel(config);
  bench::keep_last(g_rows,
                   Row{config, 2.0 * cache_bytes / 1e6, bytes / 1e6, us, gbps, splits, work});
}

/// --model-only: the roofline's time for every configuration, on `gpu`, and nothing timed.
int print_model(const bench::GpuDatasheet& gpu) {
  fmt::print("bench_attention_gpu: model only, nothing timed. {}\n\n", bench::model_note(&gpu, ""));
  fmt::print("| benchmark | MB moved | GFLOP | model us | bound |\n|---|---:|---:|---:|---|\n");
  for (int batch : kBatches) {
    for (int ctx : kContexts) {
      const bench::Work w = work_of(batch, ctx);
      fmt::print("| {} | {:.2f} | {:.3f} | {} | {} |\n", bench_name(batch, ctx), w.bytes / 1e6,
                 w.fp32_flops / 1e9, bench::model_us(&gpu, w), bench::predict(w, gpu).bound);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvheap

int main(int argc, char** argv) {
  using namespace kvheap;
  const auto flags = bench::read_gpu_benchmark_flags("bench_attention_gpu", argc, argv);
  if (!flags) return 2;
  bench::register_batch_by_context(kBatches, kContexts, bench_name, decode_attention_bench);
  const bench::GpuStart start =
      bench::start_gpu_benchmark("bench_attention_gpu", flags->listing, flags->model, print_model);
  if (start.exit_code) return *start.exit_code;
  const DeviceInfo& info = start.info;
  const BandwidthSample& peak = start.peak;
  g_peak_gbps = peak.gbps;
  bench::run_benchmarks();
  if (g_rows.empty())
    return bench::exit_status("bench_attention_gpu");  // nothing measured: no table

  const bench::GpuDatasheet* gpu = bench::model_gpu(flags->model, info.name);
  fmt::print("\n{}: {} SMs. Device-to-device copy peak: {:.0f} GB/s (read + write, {:.0f} MiB)\n",
             info.name, info.sm_count, g_peak_gbps, static_cast<double>(peak.bytes) / (1 << 20));
  fmt::print("{}\n\n", bench::model_note(gpu, info.name));
  fmt::print(
      "| config | KV budget MB | MB moved | us/call | model us | measured / model | GB/s | "
      "% of copy peak | splits |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : g_rows)
    fmt::print("| {} | {:.0f} | {:.2f} | {:.1f} | {} | {} | {:.0f} | {:.1f} | {} |\n", r.config,
               r.budget_mb, r.mb_moved, r.us, bench::model_us(gpu, r.work),
               bench::measured_over_model(gpu, r.work, r.us * 1e-6), r.gbps,
               100.0 * r.gbps / g_peak_gbps, r.splits);
  return bench::exit_status("bench_attention_gpu");
}
