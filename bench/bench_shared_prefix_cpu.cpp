// bench_shared_prefix_cpu: what reading a shared prefix once buys the CPU twin of decode attention.
//
// A decode step of `groups` prompts of `prefix` positions, each forked into `samples` sequences
// that have generated `own` positions of their own, laid out by chapter 4's allocator
// (ch04::SharedBlockManager: a shuffled pool, forks sharing every prompt block). The same step is
// timed two ways over the same pool: every row reading its whole context (cpu::attend_batch, as
// chapter 3 does) and each group reading its prefix once for all its rows
// (cpu::attend_batch_shared_prefix). Both must agree within 1e-5 relative before anything is
// timed.
//
// A third shape is a tree of three levels: a system prompt of 2048 positions, 4 documents of 2048
// after it, 4 questions after each (make_shared_prefix_tree_step); every level is read once, and
// the benchmark fails unless read-once's positions are exactly the distinct slots the rows hold.
//
// `--sweep` times prefixes of 256, 1024, 4096 and 16384 positions x 1, 2, 4, 8, 16 and 32
// samples (4 prompts) instead, for the question of when reading once pays; each row prints the
// roofline's prediction for both ways beside their measured times.
//
// Napkin math: plain attention reads sum(n_ctx) x 2 x kv_dim x 2 B (bf16) per layer; read-once
// attention reads each prefix once, groups x prefix + rows x own positions. The KV actually
// stored is the latter too. GB/s is each variant's own bytes over its own time, against the
// STREAM-like read peak measured in the same process. Heads are Llama-3-8B's (32 query, 8 KV,
// head_dim 128), one layer, block size 16. Timing is as in bench_paged_attention_cpu: alternating
// pairs, best of each.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/support/command.hpp"
#include "bench/support/cpu_caches.hpp"
#include "bench/support/failures.hpp"
#include "bench/support/rows.hpp"
#include "bench/support/shared_prefix_step.hpp"
#include "common/cache/read_once_cost.hpp"
#include "common/measure/attend_rate.hpp"
#include "common/measure/bandwidth.hpp"
#include "common/measure/fma_peak.hpp"
#include "common/util/host_buffer.hpp"
#include "common/model/model_config.hpp"
#include "kernels/attend_product_cpu.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/shared_prefix_attention_cpu.hpp"

namespace kvheap {
namespace {

using T = cpu::BF16Bits;
using bench::kOwnPositions;
using bench::kSharedBlockSize;

const ModelConfig& heads() {
  static const ModelConfig c = preset("llama-3-8b");  // 32 query heads, 8 KV heads, head_dim 128
  return c;
}
long kv_dim() { return heads().kv_dim(); }
cpu::AttendShape shape() { return {heads().n_kv_heads, heads().group_size(), heads().head_dim}; }
double row_bytes() { return 2.0 * static_cast<double>(kv_dim()) * sizeof(T); }

/// The step, its pool in host memory and its queries.
struct Step : bench::SharedPrefixStep {
  HostBuffer k, v;       // [num_blocks * block_size, kv_dim]
  std::vector<float> q;  // [rows, q_dim]

  [[nodiscard]] auto rows_of() const {
    return [this](int i) {
      const KVView& p = batch.view;
      return cpu::PagedRows<T>{k.as<T>(), v.as<T>(), p.indices.data() + p.indptr[p.row_seq[i]],
                               kSharedBlockSize, kv_dim()};
    };
  }
  [[nodiscard]] auto n_ctx_of() const {
    return [this](int i) { return batch.view.n_ctx[i]; };
  }
};

/// The step of `groups` prompts x `samples` of `prefix` positions or, with `document` > 0, the
/// tree of a system prompt of `prefix` positions, `groups` documents of `document` positions
/// after it and `samples` questions after each.
Step make_step(int groups, int samples, int prefix, int document) {
  Step s;
  static_cast<bench::SharedPrefixStep&>(s) =
      document > 0 ? bench::make_shared_prefix_tree_step(prefix, groups, document, samples)
                   : bench::make_shared_prefix_step(groups, samples, prefix);
  const std::size_t elems = static_cast<std::size_t>(s.num_blocks()) * kSharedBlockSize * kv_dim();
  s.k = HostBuffer(elems * sizeof(T));
  s.v = HostBuffer(elems * sizeof(T));
  T* kp = s.k.as<T>();
  T* vp = s.v.as<T>();
#pragma omp parallel for schedule(static)
  for (std::size_t e = 0; e < elems; ++e) {
    cpu::from_float(static_cast<float>(e % 17) * 0.01f - 0.08f, kp[e]);
    cpu::from_float(static_cast<float>(e % 13) * -0.01f + 0.06f, vp[e]);
  }
  s.q.resize(static_cast<std::size_t>(s.rows()) * heads().q_dim());
  for (std::size_t j = 0; j < s.q.size(); ++j) s.q[j] = 0.02f * static_cast<float>(j % 11) - 0.1f;
  return s;
}

void attend_plain(const Step& s, float* out) {
  cpu::attend_batch<T>(shape(), s.rows(), s.rows_of(), s.n_ctx_of(), s.q.data(), out);
}
void attend_read_once(const Step& s, const SharedPrefixPlan& plan, float* out) {
  cpu::attend_batch_shared_prefix<T>(shape(), s.rows(), s.rows_of(), s.n_ctx_of(), plan, s.q.data(),
                                     out);
}

struct Row {
  std::string config;
  double stored_mb, plain_mb, once_mb, plain_ms, once_ms;
  double gflop;  // 4 x n_heads x head_dim per position a row attends to, the same both ways
  // Where it pays: the groups the cost model kept, its time, and the model's step times.
  int groups = 0, kept = 0;
  double paying_ms = 0, plain_priced_ms = 0, once_priced_ms = 0;
};
std::vector<Row> g_rows;
double g_peak_gbps = 0.0;

/// The cost model's inputs: the read peak measured before the runs, the loops' rates.
AttentionDims dims() {
  return {heads().n_kv_heads, heads().group_size(), heads().head_dim, sizeof(T)};
}
AttentionRates& rates() {
  static AttentionRates r = cpu_attention_rates(heads(), DType::BF16, g_peak_gbps,
                                                static_cast<double>(bench::llc_bytes()));
  return r;
}

/// The cost model's time for the step in ms, plain (`read_once` false) or reading every group of
/// its plan once: each group's price, plus every row's own positions priced as plain rows.
double priced_ms(const Step& s, bool read_once) {
  const SharedPrefixPlan& plan = s.batch.view.prefixes;
  const SharedPrefixPlan::Paths paths = plan.paths(s.rows());
  int own = 0;
  for (int i = 0; i < s.rows(); ++i) own += s.batch.view.n_ctx[i] - paths.first[i];
  double sec = price_group(1, own, dims(), rates()).plain_s;
  for (int g = 0; g < plan.groups(); ++g) {
    const GroupPrice p =
        price_group(plan.indptr[g + 1] - plan.indptr[g], plan.prefix_len[g], dims(), rates());
    sec += read_once ? p.read_once_s : p.plain_s;
  }
  return sec * 1e3;
}

/// Cache positions the step's rows attend to, each distinct slot once: what reading every shared
/// block once comes to.
long distinct_positions(const Step& s) {
  const KVView& v = s.batch.view;
  std::vector<char> seen(static_cast<std::size_t>(s.num_blocks()) * kSharedBlockSize, 0);
  long distinct = 0;
  for (int i = 0; i < s.rows(); ++i)
    for (int t = 0; t < v.n_ctx[i]; ++t) {
      const int* pages = v.indices.data() + v.indptr[v.row_seq[i]];
      const std::size_t slot =
          static_cast<std::size_t>(pages[t / kSharedBlockSize]) * kSharedBlockSize +
          t % kSharedBlockSize;
      distinct += seen[slot] == 0;
      seen[slot] = 1;
    }
  return distinct;
}

void shared_prefix(benchmark::State& state, int groups, int samples, int prefix, int document) {
  static std::unique_ptr<Step> kept;  // Google Benchmark calls this more than once per config
  if (!kept || kept->groups != groups || kept->samples != samples || kept->prefix != prefix ||
      kept->document != document) {
    kept.reset();
    kept = std::make_unique<Step>(make_step(groups, samples, prefix, document));
  }
  const Step& s = *kept;
  // Read-once reads every distinct block once, at every level of the tree.
  const long once_positions = s.batch.view.prefixes.positions_read(s.batch.view.n_ctx);
  if (once_positions != distinct_positions(s)) {
    bench::fail(state, fmt::format("read-once reads {} positions where the rows hold {} distinct",
                                   once_positions, distinct_positions(s)));
    return;
  }
  const SharedPrefixPlan& all = s.batch.view.prefixes;
  const ReadOnceChoice choice = choose_read_once(all, dims(), rates());
  std::vector<float> plain(s.q.size()), once(s.q.size()), paying(s.q.size());
  attend_plain(s, plain.data());
  attend_read_once(s, all, once.data());
  attend_read_once(s, choice.plan, paying.data());
  double worst = 0.0, scale = 0.0;
  for (std::size_t j = 0; j < plain.size(); ++j) {
    worst = std::max(worst, static_cast<double>(std::fabs(plain[j] - once[j])));
    scale = std::max(scale, static_cast<double>(std::fabs(plain[j])));
  }
  for (std::size_t j = 0; j < plain.size(); ++j)
    worst = std::max(worst, static_cast<double>(std::fabs(plain[j] - paying[j])));
  if (worst > 1e-5 * scale) {
    bench::fail(state, fmt::format("read-once output differs from plain by {:.3g} relative",
                                   worst / scale));
    return;
  }
  auto timed = [](auto&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  // The three ways in turn, each iteration starting with the next of them.
  std::vector<double> tp, to, tw;
  long turn = 0;
  for (auto _ : state) {
    double sum = 0;
    for (int w = 0; w < 3; ++w) switch ((turn + w) % 3) {
        case 0: sum += tp.emplace_back(timed([&] { attend_plain(s, plain.data()); })); break;
        case 1:
          sum += to.emplace_back(timed([&] { attend_read_once(s, all, once.data()); }));
          break;
        default:
          sum += tw.emplace_back(timed([&] { attend_read_once(s, choice.plan, paying.data()); }));
      }
    ++turn;
    benchmark::DoNotOptimize(once.data());
    benchmark::DoNotOptimize(paying.data());
    state.SetIterationTime(sum * 1e-3);
  }
  const double p_ms = *std::min_element(tp.begin(), tp.end());
  const double o_ms = *std::min_element(to.begin(), to.end());
  const double w_ms = *std::min_element(tw.begin(), tw.end());
  state.counters["speedup"] = p_ms / o_ms;
  const std::string config =
      document > 0 ? fmt::format("system {}, {} documents x {}, {} questions each, own {}", prefix,
                                 groups, document, samples, kOwnPositions)
                   : fmt::format("{} prompts x {} samples, prefix {}, own {}", groups, samples,
                                 prefix, kOwnPositions);
  const double stored = static_cast<double>(s.blocks->slots_stored()) * row_bytes() / 1e6;
  double positions = 0.0;
  for (int n : s.batch.view.n_ctx) positions += n;
  const Row r{config,
              stored,
              s.bytes(false, row_bytes()) / 1e6,
              s.bytes(true, row_bytes()) / 1e6,
              p_ms,
              o_ms,
              4.0 * heads().n_heads * heads().head_dim * positions / 1e9,
              all.groups(),
              choice.kept(),
              w_ms,
              priced_ms(s, false),
              priced_ms(s, true)};
  bench::keep_last(g_rows, r);
}

/// The prefix pass alone, both ways: attend_span and attend_span_product over `positions` cached
/// positions of one KV head for `heads_q` query heads, on one thread, the cache in the CPU's
/// caches. Prints a table row: each way's best time over repeats timed in turn, its GFLOP/s and its
/// fraction of one core's share of the multiply-add peak.
template <class E>
void prefix_pass_row(const char* dtype, int heads_q, int positions, double fma_per_core) {
  const int hd = heads().head_dim;
  std::vector<E> k(static_cast<std::size_t>(positions) * hd), v(k.size());
  for (std::size_t e = 0; e < k.size(); ++e) {
    cpu::from_float(static_cast<float>(e * 37 % 101) * 0.02f - 1.0f, k[e]);
    cpu::from_float(static_cast<float>(e * 53 % 97) * 0.02f - 1.0f, v[e]);
  }
  std::vector<float> q(static_cast<std::size_t>(heads_q) * hd);
  for (std::size_t e = 0; e < q.size(); ++e) q[e] = static_cast<float>(e * 29 % 89) * 0.02f - 0.9f;
  const cpu::AttendShape sh{1, heads_q, hd};
  const cpu::ContiguousRows<E> rows{k.data(), v.data(), hd};
  std::vector<float> acc(q.size()), max(heads_q), sum(heads_q);
  std::vector<float> span_scratch(cpu::attend_span_scratch_floats(heads_q, hd));
  std::vector<float> product_scratch(cpu::attend_product_scratch_floats(heads_q, hd));
  const auto seconds = [](auto&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double span = 1e30, product = 1e30;
  for (int r = 0; r < 20; ++r) {
    span = std::min(span, seconds([&] {
                      cpu::attend_span<E>(q.data(), rows, 0, positions, sh, 0, 1, acc.data(),
                                          max.data(), sum.data(), span_scratch.data());
                    }));
    product =
        std::min(product, seconds([&] {
                   cpu::attend_span_product<E>(q.data(), rows, 0, positions, sh, 0, 1, acc.data(),
                                               max.data(), sum.data(), product_scratch.data());
                 }));
  }
  const double gflop = 4.0 * heads_q * hd * positions / 1e9;
  fmt::print("| {} | {} | {} | {:.3f} | {:.3f} | {:.2f} | {:.1f} | {:.1f} | {} |\n", dtype, heads_q,
             positions, span * 1e3, product * 1e3, span / product,
             100.0 * gflop / span / fma_per_core, 100.0 * gflop / product / fma_per_core,
             cpu::product_pays(heads_q) ? "products" : "span");
}

}  // namespace
}  // namespace kvheap

int main(int argc, char** argv) {
  using namespace kvheap;
  // --sweep: prefixes of 256 to 16384 positions x 1 to 32 samples, 4 prompts each, in place of
  // the default configurations.
  bool sweep = false;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--sweep") {
      sweep = true;
      std::copy(argv + i + 1, argv + argc, argv + i);
      --argc;
      break;
    }
  const bool listing = bench::initialize(argc, argv);
  const auto add = [](int groups, int samples, int prefix, double min_time) {
    const std::string name =
        fmt::format("shared_prefix/bf16/prompts{}/samples{}/prefix{}", groups, samples, prefix);
    benchmark::RegisterBenchmark(
        name.c_str(), [=](benchmark::State& s) { shared_prefix(s, groups, samples, prefix, 0); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(min_time);
  };
  if (sweep) {
    for (int prefix : {256, 1024, 4096, 16384})
      for (int samples : {1, 2, 4, 8, 16, 32}) add(4, samples, prefix, 3.0);
  } else {
    for (int samples : {1, 2, 4, 8, 16}) add(4, samples, 8192, 1.0);
  }
  // Three levels: a system prompt of 2048 positions, 4 documents of 2048, 4 questions each.
  if (!sweep)
    benchmark::RegisterBenchmark("shared_prefix_tree/bf16/system2048/documents4x2048/questions4",
                                 [](benchmark::State& s) { shared_prefix(s, 4, 4, 2048, 2048); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(1.0);
  // A listing runs nothing, so it needs no peak: the names are all it prints.
  if (listing) return bench::list_benchmarks();
  g_peak_gbps = measure_read_bandwidth().gbps;
  double fma_gflops = measure_fma_peak().gflops;
  bench::run_benchmarks();
  if (g_rows.empty()) return bench::exit_status("bench_shared_prefix_cpu");
  g_peak_gbps = std::max(g_peak_gbps, measure_read_bandwidth().gbps);
  fma_gflops = std::max(fma_gflops, measure_fma_peak().gflops);
  fmt::print(
      "\nShared-prefix attention, CPU twin, one layer, bf16, block size 16, {} threads. "
      "STREAM-like read peak: {:.2f} GB/s; fp32 multiply-add peak {:.1f} GFLOP/s (best of the "
      "probes before and after); LLC {} KiB. Three ways in turn: plain (every row its whole "
      "context), read once (every group), and where it pays (the groups choose_read_once "
      "keeps). The priced columns are the cost model's: flops / the loops' measured rate + bytes / "
      "read peak, a pass at a time, summed. The roofline is max(bytes / read peak, flops / "
      "multiply-add "
      "peak).\n\n"
      "| config | KV stored MB | plain reads MB | read-once reads MB | GFLOP | plain ms | plain "
      "priced ms | read-once ms | read-once priced ms | groups read once | where it pays ms | "
      "plain / where it pays | read-once speedup | read-once GB/s | read-once % of roofline |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      omp_get_max_threads(), g_peak_gbps, fma_gflops, bench::llc_bytes() / 1024);
  for (const Row& r : g_rows) {
    const double once_roofline =
        std::max(r.gflop / fma_gflops * 1e3, r.once_mb / g_peak_gbps);  // ms
    fmt::print(
        "| {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {} of {} | "
        "{:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.1f} |\n",
        r.config, r.stored_mb, r.plain_mb, r.once_mb, r.gflop, r.plain_ms, r.plain_priced_ms,
        r.once_ms, r.once_priced_ms, r.kept, r.groups, r.paying_ms, r.plain_ms / r.paying_ms,
        r.plain_ms / r.once_ms, r.once_mb / r.once_ms, 100.0 * once_roofline / r.once_ms);
  }
  fmt::print(
      "\nThe loops' rates the cost model priced with (CpuAttendRates: 128 cached positions, every "
      "thread, measured in {:.3f} s, once, before the timed calls), by query heads per KV "
      "head:\n\n| query heads | loops | GFLOP/s | of FMA peak |\n"
      "|---:|---|---:|---:|\n",
      rates().setup_seconds);
  for (int k = 2; k <= CpuAttendRates::kMostHeads; k *= 2) {
    const double rate = rates().flops_per_s(k);
    fmt::print("| {} | {} | {:.1f} | {:.2f} |\n", k,
               cpu::product_pays(k) ? "attend_span_product" : "attend_span", rate / 1e9,
               rate / 1e9 / fma_gflops);
  }
  // The prefix pass alone, per query heads per KV head: the measurement behind product_pays.
  const double per_core = fma_gflops / omp_get_max_threads();
  fmt::print(
      "\nThe prefix pass alone: one KV head of head_dim {}, 2048 positions in cache, one thread, "
      "best of 20 calls each way in turn; % of one core's share ({:.1f} GFLOP/s) of the "
      "multiply-add peak.\n\n"
      "| KV | query heads | positions | attend_span ms | attend_span_product ms | speed-up | span "
      "% of FMA | product % of FMA | chosen |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
      heads().head_dim, per_core);
  for (int heads : {8, 16, 32, 64}) {
    prefix_pass_row<cpu::BF16Bits>("bf16", heads, 2048, per_core);
    prefix_pass_row<float>("fp32", heads, 2048, per_core);
  }
  return bench::exit_status("bench_shared_prefix_cpu");
}
