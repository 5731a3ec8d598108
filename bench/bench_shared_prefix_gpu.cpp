// bench_shared_prefix_gpu: what reading a shared prefix once buys decode attention on a GPU.
//
// The step of bench_shared_prefix_cpu (bench/support/shared_prefix_step.hpp): `groups` prompts of
// `prefix` positions, each forked into `samples` sequences with 256 positions of their own, laid
// out by chapter 4's allocator in a shuffled pool. It is timed two ways over the same device pool:
// every row reading its whole context (cuda::paged_attention, chapter 3) and each group reading
// its prefix once for all its rows (cuda::shared_prefix_attention, chapter 4). Before anything is
// timed, both outputs are checked against attention computed in double precision on the host for
// three rows: read-once must be within 1e-2 of it, the tensor-core pass's bound for bf16 (or, with
// the decode kernel's pass, no further from it than plain, within fp32's rounding).
//
// Napkin math: plain attention reads sum(n_ctx) x 2 x kv_dim x 2 B (bf16) per layer; read-once
// attention reads each prefix ceil(samples x group / 128) times (group = 4 here: once up to 32
// samples), its prefix pass being a tensor-core product whose block holds 128 query rows of a KV
// head, plus every row's own positions. (On a GPU before compute capability 8.0 the prefix pass
// is the decode kernel, whose block holds 16 query heads: ceil(samples x group / 16) times.) GB/s
// is each variant's bytes over its time, against a device-to-device copy peak measured in the same
// process. L2 is flushed before each timed call (L2Flush); the table reports medians of alternating
// pairs. Heads are Llama-3-8B's (32 query, 8 KV, head_dim 128), one layer, block size 16.
//
// Plain's bytes are the bytes it asks for, not what crosses the memory bus: one prompt's rows
// get neighbouring kernel blocks, so siblings that run side by side read the same prefix blocks
// at about the same time and many of those reads hit the L2 (tens of MB on an H100/H200). Its
// DRAM traffic lies between the read-once bytes and its own, and its "GB/s" may exceed the copy
// peak; the speedup, not that rate, is what sharing buys.
//
// A last configuration is a tree of three levels (a system prompt of 2048 positions, 4 documents
// of 2048 after it, 4 questions after each): every level is read once.
//
// Beside the measured times the table prints the bandwidth roofline's prediction for each variant
// from the GPU's datasheet (bench/support/roofline_model.hpp), labelled as a model, from the same
// bytes as the MB columns; --model-only prints the model alone, on any machine.
//
// The simulator is not a performance model: in a KVHEAP_CUDA=sim build this program says so and
// times nothing (a listing, --benchmark_list_tests, still prints the names, and --model-only the
// model).
// (bench_shared_prefix_cpu measures the CPU twin in every build.) --smoke runs the harness on a
// tiny step without timing it, in any build; the test suite does that.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/support/block_sweep.hpp"
#include "bench/support/command.hpp"
#include "bench/support/failures.hpp"
#include "bench/support/gpu_start.hpp"
#include "bench/support/gpu_pair_timing.hpp"
#include "bench/support/roofline_model.hpp"
#include "bench/support/shared_prefix_step.hpp"
#include "common/measure/cuda/device_bandwidth.hpp"
#include "common/model/model_config.hpp"
#include "device/buffers.hpp"
#include "device/device.hpp"
#include "kernels/decode_attention.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/shared_prefix_attention.hpp"
#include "kernels/shared_prefix_device.hpp"

namespace kvheap {
namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128, kGroup = kHeads / kKvHeads;
constexpr std::size_t kRowBytes = static_cast<std::size_t>(kKvHeads) * kHeadDim * 2;  // bf16
constexpr DType kKv = DType::BF16;

double g_peak_gbps = 0.0;

/// Element e of the pool's K (kv 0) or V (kv 1), as bf16 bits: finite values 0x3c00..0x3cff, in
/// [0.0078, 0.0156), different per slot.
std::uint16_t kv_bits(std::size_t e, int kv) {
  return static_cast<std::uint16_t>(0x3c00 | (((e * 2654435761u + kv) >> 7) & 0xff));
}
/// Query element j of the batch ([rows, heads, head_dim]).
float q_value(std::size_t j) { return 0.02f * static_cast<float>(j % 11) - 0.1f; }

/// The step on the device: pool, page tables, plan and queries.
struct Problem {
  bench::SharedPrefixStep step;
  cuda::AttentionShape shape;
  DeviceBuffer<unsigned char> k, v;  // [num_blocks * block_size, kv_dim] bf16
  DeviceBuffer<int> indptr, indices, last_page_len, row_seq, n_ctx;
  std::unique_ptr<DeviceSharedPrefix> plan;
  PagedLocator loc;
  SharedPrefixView view;
  DeviceBuffer<float> q, out_plain, out_once, wide_q;
};

/// Builds the problem, or returns why it does not fit the free memory.
/// The step of `groups` prompts x `samples` of `prefix` positions or, with `document` > 0, the
/// tree of a system prompt of `prefix` positions, `groups` documents of `document` positions after
/// it and `samples` questions after each (bench/support/shared_prefix_step.hpp).
bench::SharedPrefixStep make_step(int groups, int samples, int prefix, int document) {
  return document > 0 ? bench::make_shared_prefix_tree_step(prefix, groups, document, samples)
                      : bench::make_shared_prefix_step(groups, samples, prefix);
}

std::string make_problem(Problem& p, int groups, int samples, int prefix, int document = 0) {
  p.step = make_step(groups, samples, prefix, document);
  const std::size_t pool =
      static_cast<std::size_t>(p.step.num_blocks()) * bench::kSharedBlockSize * kRowBytes;
  std::size_t free_bytes = 0, total_bytes = 0;
  KVHEAP_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (2 * pool + (std::size_t{512} << 20) > free_bytes)
    return fmt::format("needs {:.1f} GB of KV, {:.1f} GB free", 2 * pool / 1e9, free_bytes / 1e9);
  const KVView& pb = p.step.batch.view;
  const int n = p.step.rows();
  p.shape = {n, kHeads, kKvHeads, kHeadDim, pb.max_ctx};
  std::vector<std::uint16_t> pattern(pool / 2);
  for (int kv = 0; kv < 2; ++kv) {
    for (std::size_t e = 0; e < pattern.size(); ++e) pattern[e] = kv_bits(e, kv);
    std::vector<unsigned char> bytes(pool);
    std::memcpy(bytes.data(), pattern.data(), pool);
    (kv == 0 ? p.k : p.v) = DeviceBuffer<unsigned char>::from_host(bytes);
  }
  p.indptr = DeviceBuffer<int>::from_host(pb.indptr);
  p.indices = DeviceBuffer<int>::from_host(pb.indices);
  p.last_page_len = DeviceBuffer<int>::from_host(pb.last_page_len);
  p.row_seq = DeviceBuffer<int>::from_host(pb.row_seq);
  p.n_ctx = DeviceBuffer<int>::from_host(pb.n_ctx);
  p.loc = PagedLocator{p.indptr.data(), p.indices.data(), p.last_page_len.data(), p.row_seq.data(),
                       bench::kSharedBlockSize};
  p.plan = std::make_unique<DeviceSharedPrefix>(p.step.batch.view.prefixes, pb.row_seq, pb.n_ctx);
  p.view = p.plan->view();
  const std::size_t q_elems = static_cast<std::size_t>(n) * kHeads * kHeadDim;
  std::vector<float> q(q_elems);
  for (std::size_t j = 0; j < q.size(); ++j) q[j] = q_value(j);
  p.q = DeviceBuffer<float>::from_host(q);
  p.out_plain = DeviceBuffer<float>(q_elems);
  p.out_once = DeviceBuffer<float>(q_elems);
  p.wide_q = DeviceBuffer<float>(std::max<std::size_t>(
      1, cuda::shared_prefix_wide_q_floats(p.view.groups, p.view.widest, kHeads, kHeadDim)));
  return {};
}

/// Whether read-once's prefix pass is the tensor-core product: on this device, or with none
/// (--model-only) as on every GPU of the model's datasheets (compute capability 8.0 and later).
bool product_pass() {
  return device_unavailable_reason() || cuda::prefix_pass_is_product(kKv, kHeadDim);
}

/// Bytes read-once attention reads: each prefix once per slice of its wide row (128 query heads
/// per KV head for the product, 16 for the decode kernel), plus every row's own positions.
double read_once_bytes(const bench::SharedPrefixStep& step) {
  const int heads = product_pass() ? kPrefixProductRows : kGpuHeadsPerBlock;
  return static_cast<double>(
             step.batch.view.prefixes.positions_read(step.batch.view.n_ctx, kGroup, heads)) *
         2.0 * kRowBytes;
}
double read_once_bytes(const Problem& p) { return read_once_bytes(p.step); }

/// The model's work of each variant: the bytes of the table's MB columns, and attention's flops,
/// the same for both (every query still meets every position of its context).
struct StepWork {
  bench::Work plain, once;
};
StepWork work_of(const bench::SharedPrefixStep& step) {
  const double positions = static_cast<double>(bench::tokens_of(step.batch.view.n_ctx));
  const bench::Work attention =
      bench::attention_work(positions, kHeads, kKvHeads, kHeadDim, 2.0, 0);
  StepWork w{attention, attention};
  w.plain.bytes = step.bytes(false, 2.0 * kRowBytes);
  w.once.bytes = read_once_bytes(step);
  if (product_pass()) {  // the prefix positions' multiply-adds run on the tensor cores
    const SharedPrefixPlan& plan = step.batch.view.prefixes;
    double shared = 0.0;  // row positions inside a group's prefix
    for (int g = 0; g < plan.groups(); ++g)
      shared += static_cast<double>(plan.indptr[g + 1] - plan.indptr[g]) * plan.prefix_len[g];
    const double flops =
        bench::attention_work(shared, kHeads, kKvHeads, kHeadDim, 2.0, 0).fp32_flops;
    w.once.tensor_flops = flops;
    w.once.fp32_flops -= flops;
  }
  return w;
}

/// The largest errors of both outputs ([rows, heads, head_dim], on the host) against attention
/// computed in double precision from the same bf16 K and V and fp32 queries, over `rows`, relative
/// to the reference's largest magnitude there. With these near-uniform scores, one position lost
/// from (or read twice into) a 16K-position context moves an output by up to about 2e-5 of that
/// magnitude; so can fp32 summation over 16K positions in either kernel (docs/results/gpu-h200/
/// has the errors measured), so the check compares read-once's error with plain's rather than
/// the two outputs with each other. The tests, on shorter contexts, are
/// what pin the positions read exactly.
struct ReferenceErrors {
  double plain = 0.0, once = 0.0;
};
ReferenceErrors reference_errors(const Problem& p, const std::vector<float>& plain,
                                 const std::vector<float>& once, const std::vector<int>& rows) {
  const KVView& v = p.step.batch.view;
  const int bs = bench::kSharedBlockSize, kv_dim = kKvHeads * kHeadDim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  auto element = [](std::uint16_t bits) {
    const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &wide, sizeof f);
    return static_cast<double>(f);
  };
  double worst_plain = 0.0, worst_once = 0.0, size = 0.0;
  std::vector<double> score, acc(kHeadDim);
  for (int r : rows) {
    const int seq = v.row_seq[r], n = v.n_ctx[r];
    score.assign(n, 0.0);
    for (int h = 0; h < kHeads; ++h) {
      const std::size_t q0 = (static_cast<std::size_t>(r) * kHeads + h) * kHeadDim;
      const std::size_t col = static_cast<std::size_t>(h / kGroup) * kHeadDim;
      double top = -1e300;
      for (int t = 0; t < n; ++t) {
        const std::size_t slot = static_cast<std::size_t>(v.indices[v.indptr[seq] + t / bs]) * bs +
                                 static_cast<std::size_t>(t % bs);
        double dot = 0.0;
        for (int d = 0; d < kHeadDim; ++d)
          dot +=
              static_cast<double>(q_value(q0 + d)) * element(kv_bits(slot * kv_dim + col + d, 0));
        score[t] = dot * scale;
        top = std::max(top, score[t]);
      }
      double sum = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int t = 0; t < n; ++t) {
        const std::size_t slot = static_cast<std::size_t>(v.indices[v.indptr[seq] + t / bs]) * bs +
                                 static_cast<std::size_t>(t % bs);
        const double w = std::exp(score[t] - top);
        sum += w;
        for (int d = 0; d < kHeadDim; ++d)
          acc[d] += w * element(kv_bits(slot * kv_dim + col + d, 1));
      }
      for (int d = 0; d < kHeadDim; ++d) {
        const double ref = acc[d] / sum;
        size = std::max(size, std::fabs(ref));
        worst_plain = std::max(worst_plain, std::fabs(plain[q0 + d] - ref));
        worst_once = std::max(worst_once, std::fabs(once[q0 + d] - ref));
      }
    }
  }
  return {worst_plain / size, worst_once / size};
}

/// Both attentions over one problem, with their workspaces, on one stream.
struct Kernels {
  Problem& p;
  cuda::AttentionWorkspace ws, prefix_ws, own_ws;
  Stream stream;
  explicit Kernels(Problem& problem) : p(problem) {}
  void plain() {
    cuda::paged_attention(kKv, p.q.data(), p.k.data(), p.v.data(), p.n_ctx.data(), p.loc, p.shape,
                          p.out_plain.data(), ws, stream);
  }
  void once() {
    cuda::shared_prefix_attention(kKv, p.q.data(), p.k.data(), p.v.data(), p.loc, p.view, p.shape,
                                  p.out_once.data(), p.wide_q.data(), prefix_ws, own_ws, stream);
  }
  /// Runs both (also the warm-up: grows the workspaces, loads the modules) and checks them: the
  /// largest difference between them relative to the plain output's largest magnitude, and each
  /// one's error against the double-precision reference over `rows`.
  struct Check {
    double diff = 0.0;
    ReferenceErrors ref;
    /// Read-once passes within 1e-2 of the reference where its prefix pass is the tensor-core
    /// product (bf16 queries and weights: its tests' bound); with the decode kernel's pass, when
    /// it is no further from the reference than twice plain's error plus 1e-6: the same fp32
    /// sums, in another order.
    [[nodiscard]] bool passed() const {
      return product_pass() ? ref.once <= 1e-2 : ref.once <= 2.0 * ref.plain + 1e-6;
    }
    [[nodiscard]] std::string describe() const {
      return fmt::format(
          "read-once vs plain {:.3g}; against a double-precision reference: plain {:.3g}, "
          "read-once {:.3g} (relative to the largest output)",
          diff, ref.plain, ref.once);
    }
  };
  Check check(const std::vector<int>& rows) {
    plain();
    once();
    const std::vector<float> a = p.out_plain.to_host(stream), b = p.out_once.to_host(stream);
    double worst = 0.0, scale = 0.0;
    for (std::size_t j = 0; j < a.size(); ++j) {
      worst = std::max(worst, static_cast<double>(std::fabs(a[j] - b[j])));
      scale = std::max(scale, static_cast<double>(std::fabs(a[j])));
    }
    return {scale > 0.0 ? worst / scale : worst, reference_errors(p, a, b, rows)};
  }
};

/// --smoke: the harness on two tiny steps, checked and not timed, so that it runs in the
/// simulator build's tests too: 2 prompts of 64 positions with 3 samples each (2 groups), and a
/// tree of a 64-position system prompt, 2 documents of 32 and 2 questions each (3 groups).
int smoke() {
  int failures = 0;
  for (const int document : {0, 32}) {
    Problem p;
    if (const std::string err = make_problem(p, 2, document > 0 ? 2 : 3, 64, document);
        !err.empty()) {
      fmt::print(stderr, "bench_shared_prefix_gpu --smoke: {}\n", err);
      return 1;
    }
    Kernels k(p);
    std::vector<int> rows(static_cast<std::size_t>(p.step.rows()));
    for (std::size_t r = 0; r < rows.size(); ++r) rows[r] = static_cast<int>(r);
    const Kernels::Check c = k.check(rows);
    const double plain = p.step.bytes(false, 2.0 * kRowBytes), once = read_once_bytes(p);
    fmt::print(
        "bench_shared_prefix_gpu --smoke: {} groups; {}; {:.0f} bytes read plain, {:.0f} read "
        "once\n",
        p.view.groups, c.describe(), plain, once);
    const int groups = document > 0 ? 3 : 2;
    failures +=
        c.passed() && c.ref.plain <= 1e-5 && p.view.groups == groups && once < plain ? 0 : 1;
  }
  return failures == 0 ? 0 : 1;
}

struct Row {
  std::string config;
  double plain_mb, once_mb, plain_ms, once_ms;
  StepWork work;
};
std::vector<Row> g_rows;

void shared_prefix(benchmark::State& state, int groups, int samples, int prefix, int document) {
  static std::unique_ptr<Problem> kept;  // Google Benchmark calls this more than once per config
  if (!kept || kept->step.groups != groups || kept->step.samples != samples ||
      kept->step.prefix != prefix || kept->step.document != document) {
    kept.reset();
    auto p = std::make_unique<Problem>();
    if (const std::string err = make_problem(*p, groups, samples, prefix, document); !err.empty()) {
      bench::fail(state, err);
      return;
    }
    kept = std::move(p);
  }
  Problem& p = *kept;
  Kernels k(p);
  // Three rows against the reference (each is 32 heads x a 16K-position context on the host):
  // the first and last prompt's first and last sample, and one between.
  const int n = p.step.rows();
  const Kernels::Check c = k.check({0, n / 2, n - 1});
  fmt::print(stderr, "{} prompts x {} samples: {}\n", groups, samples, c.describe());
  if (!c.passed()) {
    bench::fail(state, "read-once attention is too far from the reference: " + c.describe());
    return;
  }
  Stream& stream = k.stream;
  auto plain = [&] { k.plain(); };
  auto once = [&] { k.once(); };
  const bench::PairTiming t = bench::timed_pair(state, stream, plain, once);
  const double p_ms = t.a_ms, o_ms = t.b_ms;
  state.counters["speedup"] = p_ms / o_ms;
  const Row row{document > 0
                    ? fmt::format("system {}, {} documents x {}, {} questions each, own {}", prefix,
                                  groups, document, samples, bench::kOwnPositions)
                    : fmt::format("{} prompts x {} samples, prefix {}, own {}", groups, samples,
                                  prefix, bench::kOwnPositions),
                p.step.bytes(false, 2.0 * kRowBytes) / 1e6,
                read_once_bytes(p) / 1e6,
                p_ms,
                o_ms,
                work_of(p.step)};
  bench::keep_last(g_rows, row, [](const Row& x, const Row& y) { return x.config == y.config; });
}

constexpr int kSamples[] = {1, 2, 8, 32};
constexpr int kPrompts = 4, kPrefix = 16384;

std::string bench_name(int samples) {
  return fmt::format("shared_prefix/bf16/prompts{}/samples{}/prefix{}", kPrompts, samples, kPrefix);
}
/// Three levels: a system prompt of kTreeLevel positions, kTreeFanout documents of kTreeLevel
/// after it, kTreeFanout questions after each.
constexpr int kTreeLevel = 2048, kTreeFanout = 4;
const char* const kTreeName = "shared_prefix_tree/bf16/system2048/documents4x2048/questions4";

/// --model-only: the roofline's time for both variants of every configuration, on `gpu`, and
/// nothing timed (the steps are laid out by the allocator on the host; no device is touched).
int print_model(const bench::GpuDatasheet& gpu) {
  fmt::print("bench_shared_prefix_gpu: model only, nothing timed. {}\n\n",
             bench::model_note(&gpu, ""));
  fmt::print(
      "| benchmark | plain reads MB | read-once reads MB | GFLOP | plain model us | read-once "
      "model "
      "us | model speedup |\n|---|---:|---:|---:|---:|---:|---:|\n");
  const auto row = [&](const std::string& name, const bench::SharedPrefixStep& step) {
    const StepWork w = work_of(step);
    const double plain = bench::predict(w.plain, gpu).seconds,
                 once = bench::predict(w.once, gpu).seconds;
    fmt::print("| {} | {:.1f} | {:.1f} | {:.3f} | {:.1f} | {:.1f} | {:.2f} |\n", name,
               w.plain.bytes / 1e6, w.once.bytes / 1e6, w.plain.fp32_flops / 1e9, plain * 1e6,
               once * 1e6, plain / once);
  };
  for (int samples : kSamples)
    row(bench_name(samples), bench::make_shared_prefix_step(kPrompts, samples, kPrefix));
  row(kTreeName, make_step(kTreeFanout, kTreeFanout, kTreeLevel, kTreeLevel));
  return 0;
}

}  // namespace
}  // namespace kvheap

int main(int argc, char** argv) {
  using namespace kvheap;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--smoke") return smoke();
  const auto flags = bench::read_gpu_benchmark_flags("bench_shared_prefix_gpu", argc, argv);
  if (!flags) return 2;
  for (int samples : kSamples) {
    benchmark::RegisterBenchmark(
        bench_name(samples).c_str(),
        [=](benchmark::State& s) { shared_prefix(s, kPrompts, samples, kPrefix, 0); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.2);
  }
  benchmark::RegisterBenchmark(kTreeName,
                               [](benchmark::State& s) {
                                 shared_prefix(s, kTreeFanout, kTreeFanout, kTreeLevel, kTreeLevel);
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(0.2);
  const bench::GpuStart start =
      bench::start_gpu_benchmark("bench_shared_prefix_gpu", flags->listing, flags->model,
                                 print_model, "bench_shared_prefix_cpu");
  if (start.exit_code) return *start.exit_code;
  const DeviceInfo& info = start.info;
  const BandwidthSample& peak = start.peak;
  g_peak_gbps = peak.gbps;
  bench::run_benchmarks();
  if (g_rows.empty()) return bench::exit_status("bench_shared_prefix_gpu");  // nothing measured
  const bench::GpuDatasheet* gpu = bench::model_gpu(flags->model, info.name);
  fmt::print(
      "\nShared-prefix attention, {} ({} SMs), one layer, bf16, block size {}. Device-to-device "
      "copy peak: {:.0f} GB/s. {}\n\n"
      "| config | plain reads MB | read-once reads MB | plain us | plain model us | read-once us | "
      "read-once model us | read-once / model | speedup | plain GB/s | read-once GB/s | "
      "read-once % of copy peak |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      info.name, info.sm_count, bench::kSharedBlockSize, g_peak_gbps,
      bench::model_note(gpu, info.name));
  for (const Row& r : g_rows) {
    const double once_gbps = r.once_mb / r.once_ms;  // MB per ms = GB/s
    fmt::print(
        "| {} | {:.1f} | {:.1f} | {:.1f} | {} | {:.1f} | {} | {} | {:.2f} | {:.0f} | {:.0f} | "
        "{:.1f} |\n",
        r.config, r.plain_mb, r.once_mb, 1e3 * r.plain_ms, bench::model_us(gpu, r.work.plain),
        1e3 * r.once_ms, bench::model_us(gpu, r.work.once),
        bench::measured_over_model(gpu, r.work.once, 1e-3 * r.once_ms), r.plain_ms / r.once_ms,
        r.plain_mb / r.plain_ms, once_gbps, 100.0 * once_gbps / g_peak_gbps);
  }
  fmt::print(
      "\nPlain reads MB and GB/s count what plain attention asks for. Siblings of one prompt run "
      "side by side and find much of their shared prefix in the {:.0f} MiB L2, so plain's DRAM "
      "traffic lies between the read-once bytes and its own, and its GB/s can exceed the copy "
      "peak.\n",
      static_cast<double>(info.l2_bytes) / (1 << 20));
  return bench::exit_status("bench_shared_prefix_gpu");
}
