// bench_matmul_cpu: the forward pass's weight products on the CPU, shape by shape, against the
// alternatives: Eigen's general product, split across threads by output columns as the forward
// pass once ran it, and OpenBLAS's sgemm where the build found it.
//
// A product out[n, out] = x[n, in] W^T does 2 n in out flops and reads W (in x out elements, 4
// bytes each in fp32, 2 in bf16) plus x and out. One row reads every weight for one multiply-add,
// so it is bound by the read bandwidth; from a few dozen rows on, by the multiply-add rate. The
// table gives both peaks, measured in this run, and each time's fraction of the roofline
// max(bytes / read peak, flops / FMA peak). Each product's operands stay where the cache keeps
// them between repeats, so the one-row rows measure the caches' bandwidth where W fits in them
// (the table marks them), not memory's; whole passes from memory are ch03_paged_blocks's numbers.
#include <fmt/format.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/support/plain_options.hpp"
#include "common/measure/bandwidth.hpp"
#include "common/model/model_config.hpp"
#include "common/program/cli.hpp"
#include "common/program/options.hpp"
#include "kernels/matmul.hpp"
#if defined(KVHEAP_OPENBLAS)
#include <cblas.h>
#endif

namespace kvheap {
namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Best seconds of `f` over repeats lasting at least `min_seconds` in all (and at least 3).
double best_seconds(const std::function<void()>& f, double min_seconds) {
  f();  // warm: first touch, thread start
  double best = 1e30, total = 0;
  for (int r = 0; r < 3 || total < min_seconds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

/// Eigen's product over each thread's slice of output columns (the forward pass's long-batch
/// path until the packed kernel replaced it).
void eigen_product(float* out, const float* x, const float* w, int n, int in_dim, int out_dim) {
  Eigen::Map<const RowMajor> X(x, n, in_dim);
  Eigen::Map<const RowMajor> W(w, out_dim, in_dim);
  Eigen::Map<RowMajor> Y(out, n, out_dim);
  const bool parallel = static_cast<long>(n) * in_dim * out_dim >= cpu::kParallelMacs;
#pragma omp parallel if (parallel)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int per = ((out_dim + nt - 1) / nt + 15) / 16 * 16;
    const int begin = std::min(out_dim, t * per), end = std::min(out_dim, begin + per);
    if (end > begin)
      Y.middleCols(begin, end - begin).noalias() = X * W.middleRows(begin, end - begin).transpose();
  }
}

struct Shape {
  std::string name;
  int in_dim, out_dim;
};

/// The distinct weight shapes of a model: q, k/v, o, gate/up, down, classifier.
std::vector<Shape> shapes_of(const ModelConfig& c) {
  std::vector<Shape> s = {{"wq", c.dim, c.q_dim()},    {"wk, wv", c.dim, c.kv_dim()},
                          {"wo", c.q_dim(), c.dim},    {"w1, w3", c.dim, c.hidden_dim},
                          {"w2", c.hidden_dim, c.dim}, {"classifier", c.dim, c.vocab_size}};
  std::vector<Shape> distinct;
  for (const Shape& x : s) {
    const auto same = std::find_if(distinct.begin(), distinct.end(), [&](const Shape& d) {
      return d.in_dim == x.in_dim && d.out_dim == x.out_dim;
    });
    if (same == distinct.end())
      distinct.push_back(x);
    else
      same->name += ", " + x.name;
  }
  return distinct;
}

}  // namespace
}  // namespace kvheap

int main(int argc, char** argv) {
  using namespace kvheap;
  CommandLine cli{
      "bench_matmul_cpu: the forward pass's weight products, shape by shape, against Eigen's "
      "product and OpenBLAS"};
  std::string model = "stories110m", rows_list = "1,4,16,32,64,128,512";
  double min_time = 0.2;
  bool no_peak = false;
  cli.option("--model", model, "Preset whose weight shapes to time").show_default();
  cli.option("--rows", rows_list, "Batch rows per product, comma-separated").show_default();
  cli.option("--min-time", min_time, "Seconds of repeats per product, at least (0-60)")
      .show_default();
  cli.flag("--no-peak", no_peak, "Skip measuring the peaks (no fractions are printed)");
  return run_cli(cli, argc, argv, [&] {
    const std::vector<int> rows = bench::counts_option(rows_list, "--rows", 1);
    bench::check_min_time(min_time);
    const int threads = apply_threads(CommonOptions{});
    const ModelConfig c = preset(model);
    const MeasuredPeak peak = no_peak ? MeasuredPeak{} : cpu_read_peak();
    std::string blas = "not built (no OpenBLAS found)";
#if defined(KVHEAP_OPENBLAS)
    std::string version = OPENBLAS_VERSION;  // " OpenBLAS 0.3.21 "
    version.erase(0, version.find_first_not_of(' '));
    version.erase(version.find_last_not_of(' ') + 1);
    blas = fmt::format("{}, its {} kernels, {} threads", version, openblas_get_corename(),
                       openblas_get_num_threads());
#endif
    fmt::print("bench_matmul_cpu: {} weight shapes, {} threads\n", c.name, threads);
    if (no_peak)
      fmt::print("peaks not measured (--no-peak): no fractions\n");
    else
      fmt::print("FMA peak {:.1f} GFLOP/s, read peak {:.2f} GB/s, both measured now\n", peak.gflops,
                 peak.gbps);
    fmt::print("kvheap: packed panels, {}\n", cpu::matmul_path(DType::F32));
    fmt::print("kvheap bf16: {}\n", cpu::matmul_path(DType::BF16));
    const bool pairs = cpu::bf16_pairs_built();
    fmt::print("kvheap bf16 pairs: {}\n",
               pairs ? cpu::matmul_path(DType::BF16, cpu::Bf16Products::kPairs)
                     : "not built (no AVX512-BF16 on the build's target)");
    fmt::print("Eigen: general product per thread's columns; BLAS: {}\n\n", blas);
    fmt::print(
        "| weights | in x out | rows | GFLOP | MB read (fp32) | kvheap fp32 ms | Eigen ms | BLAS "
        "ms "
        "| fastest fp32 | kvheap GFLOP/s | of FMA peak | of roofline | kvheap bf16 ms | bf16 of "
        "roofline | bf16 pairs ms |\n");
    fmt::print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    bool any_cached = false;
    for (const Shape& s : shapes_of(c)) {
      std::vector<float> w(static_cast<std::size_t>(s.in_dim) * s.out_dim);
      for (float& v : w) v = nd(rng);
      const cpu::PackedMatrix f32(w.data(), s.out_dim, s.in_dim, DType::F32);
      const cpu::PackedMatrix bf16(w.data(), s.out_dim, s.in_dim, DType::BF16);
      const cpu::PackedMatrix bf16_pairs =
          pairs ? cpu::PackedMatrix(w.data(), s.out_dim, s.in_dim, DType::BF16,
                                    cpu::Bf16Products::kPairs)
                : cpu::PackedMatrix();
      for (const int n : rows) {
        std::vector<float> x(static_cast<std::size_t>(n) * s.in_dim);
        for (float& v : x) v = nd(rng);
        std::vector<float> out(static_cast<std::size_t>(n) * s.out_dim);
        const double flops = 2.0 * n * s.in_dim * static_cast<double>(s.out_dim);
        const auto bytes = [&](double weight_bytes) {  // W once, x and out once
          return weight_bytes + 4.0 * n * (s.in_dim + static_cast<double>(s.out_dim));
        };
        // Fractions of the roofline, as text ("-" without the peaks).
        const auto of_roof = [&](double b, double seconds, bool cached) -> std::string {
          if (no_peak) return "-";
          const double roof = std::max(b / (peak.gbps * 1e9), flops / (peak.gflops * 1e9));
          return fmt::format("{:.2f}{}", roof / seconds, cached ? "*" : "");
        };
        const double t_packed =
            best_seconds([&] { cpu::matmul(out.data(), x.data(), f32, n); }, min_time);
        const double t_bf16 =
            best_seconds([&] { cpu::matmul(out.data(), x.data(), bf16, n); }, min_time);
        const double t_pairs =
            pairs
                ? best_seconds([&] { cpu::matmul(out.data(), x.data(), bf16_pairs, n); }, min_time)
                : 0.0;
        const double t_eigen = best_seconds(
            [&] { eigen_product(out.data(), x.data(), w.data(), n, s.in_dim, s.out_dim); },
            min_time);
        double t_blas = 0;
#if defined(KVHEAP_OPENBLAS)
        t_blas = best_seconds(
            [&] {
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, s.out_dim, s.in_dim, 1.0f,
                          x.data(), s.in_dim, w.data(), s.in_dim, 0.0f, out.data(), s.out_dim);
            },
            min_time);
#endif
        std::string fastest = "kvheap";
        double t_best = t_packed;
        if (t_eigen < t_best) fastest = "Eigen", t_best = t_eigen;
        if (t_blas > 0 && t_blas < t_best) fastest = "BLAS", t_best = t_blas;
        const double b32 = bytes(4.0 * s.in_dim * s.out_dim);
        const double b16 = bytes(2.0 * s.in_dim * s.out_dim);
        const bool cached = !no_peak && peak.partly_cached(b32);
        any_cached = any_cached || cached;
        fmt::print(
            "| {} | {} x {} | {} | {:.4f} | {:.2f} | {:.3f} | {:.3f} | {} | {} | {:.0f} | {} | {} "
            "| "
            "{:.3f} | {} | {} |\n",
            s.name, s.in_dim, s.out_dim, n, flops / 1e9, b32 / 1e6, t_packed * 1e3, t_eigen * 1e3,
            t_blas > 0 ? fmt::format("{:.3f}", t_blas * 1e3) : "-", fastest, flops / t_packed / 1e9,
            no_peak ? "-" : fmt::format("{:.2f}", flops / t_packed / 1e9 / peak.gflops),
            of_roof(b32, t_packed, cached), t_bf16 * 1e3, of_roof(b16, t_bf16, false),
            pairs ? fmt::format("{:.3f}", t_pairs * 1e3) : "-");
      }
    }
    if (any_cached) fmt::print("\n* {}\n", peak.cached_note("product"));
  });
}
