// bench_sampling: what choosing a token costs the host per logit row, greedy against a draw with
// temperature and top-p, at the vocabularies of the presets (32000, 128256). The CPU backend
// chooses every token this way (kernels/sample_cpu.cpp), one row per OpenMP thread; a GPU runs
// the twin on the device. One row, one thread here; a greedy row, a top-p 0.9 draw and a top-p 1
// draw take turns, row by row, so that each draw's ratio to the greedy row is measured side by
// side.
//
//   build/cpu/bench/bench_sampling [--rows N]
//
// Logits: stories15m's own (the preset's synthetic weights after a short prompt: what chapter 5's
// README command samples from), two shapes at Llama 3's 128256 entries: normal (sigma 2), and
// peaked (the same plus 16 tokens 12 above the rest, as a model's handful of likely
// continuations), and, where SmolLM2-135M-Instruct is found (KVHEAP_MODELS_DIR, or the model
// cache: scripts/fetch-model.sh smollm2), a real model's after a chat prompt, at the first token
// of its reply and a few tokens into it. Bytes: a greedy row reads its logits once (4 B each); a
// draw reads them twice (once with AVX-512, and then only the 2048 it walks at top-p 1, or the
// blocks that hold candidates at top-p < 1), and a top-p < 1 draw also writes its candidates (8 B
// each: p and the index) and reads them back three times (bins, crossing bin, walk). Before
// anything is timed, each draw is checked against a double-precision full sort of the vocabulary
// (kernels/sample.hpp's rule).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "chapters/01_cpu_reference/reserved_cache.hpp"
#include "common/program/cli.hpp"
#include "common/forward/forward_cpu.hpp"
#include "common/model/model_loader.hpp"
#include "common/model/synthetic_weights.hpp"
#include "common/tokenizer/gguf_tokenizer.hpp"
#include "kernels/sample.hpp"

namespace kvheap {
namespace {

struct Logits {
  std::string name;
  std::vector<float> row;
};

/// The logits of `w` after `prompt`, at the prompt's last position.
std::vector<float> last_logits(const ModelWeights& w, const std::vector<int>& prompt) {
  ch01::ReservedCache cache(w.config, DType::F32);
  const int slot = cache.admit();
  CpuForward fwd(w);
  Batch b;
  for (std::size_t i = 0; i < prompt.size(); ++i)
    b.rows.push_back({prompt[i], slot, static_cast<int>(i), i + 1 == prompt.size()});
  const std::span<const float> l = fwd.forward(b, cache);
  return {l.begin(), l.end()};
}

Logits stories15m_logits() {
  const std::vector<int> prompt = {1, 403, 411, 263, 931};  // BOS and four ids
  return {"stories15m (synthetic weights)",
          last_logits(make_synthetic_weights(preset("stories15m"), 1), prompt)};
}

/// SmolLM2-135M-Instruct's logits after a chat prompt, at the first token of the reply and a few
/// tokens into it; none (the reason printed) where the model file is not found.
std::vector<Logits> smollm2_logits() {
  std::string path;
  try {
    path = resolve_model_name("smollm2");
  } catch (const std::exception& e) {
    fmt::print("no SmolLM2-135M-Instruct rows: {}\n", e.what());
    return {};
  }
  const ModelWeights w = load_model(path);
  const auto tok = load_gguf_tokenizer(path);
  const std::string chat =
      "<|im_start|>user\nWrite a short story about a lighthouse keeper.<|im_end|>\n"
      "<|im_start|>assistant\n";
  return {
      {"SmolLM2-135M-Instruct, a reply's first token", last_logits(w, tok->encode(chat, false))},
      {"SmolLM2-135M-Instruct, in the reply",
       last_logits(w, tok->encode(chat + "Once upon a time", false))}};
}

Logits normal_logits(int vocab, bool peaked) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> row(static_cast<std::size_t>(vocab));
  for (float& x : row) x = normal(rng);
  if (peaked)
    for (int k = 0; k < 16; ++k) row[static_cast<std::size_t>(rng() % vocab)] += 12.0f;
  return {peaked ? "normal, sigma 2, 16 tokens +12" : "normal, sigma 2", std::move(row)};
}

/// The rule by a full sort in double precision: the token, and whether u * mass or the cut lay
/// within 1e-5 of the mass of a boundary (a near tie, which a float sum may decide otherwise).
std::pair<int, bool> reference(const std::vector<float>& x, const SamplingJob& job) {
  const double mx = *std::max_element(x.begin(), x.end());
  std::vector<double> p(x.size());
  double sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    sum += p[i] = std::exp((x[i] - mx) * static_cast<double>(job.inv_temperature));
  std::vector<std::size_t> order(x.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return p[a] > p[b]; });
  const double eps = 1e-5 * sum, cut = job.top_p * sum;
  double mass = 0;
  std::size_t last = order.size() - 1;
  bool near = false;
  if (job.top_p < 1.0f)
    for (std::size_t i = 0; i < order.size(); ++i)
      if ((mass += p[order[i]]) > cut) {
        last = i;
        near = mass - p[order[i]] > cut - eps || mass < cut + eps;
        break;
      }
  if (job.top_p >= 1.0f) mass = sum;
  std::vector<char> in(x.size(), 0);
  for (std::size_t i = 0; i <= last; ++i) in[order[i]] = 1;
  const double goal = job.u * mass;
  double cdf = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!in[i]) continue;
    cdf += p[i];
    if (goal < cdf)
      return {static_cast<int>(i), near || cdf - goal < eps || goal - (cdf - p[i]) < eps};
  }
  return {static_cast<int>(order[last]), true};
}

/// Median microseconds per row of `rows` jobs like each of `jobs` (u varied) over `x`. The jobs
/// take turns row by row, so that a change in the host's speed meets all of them alike and their
/// ratios stay side by side.
std::vector<double> time_rows(const std::vector<float>& x, const std::vector<SamplingJob>& jobs,
                              int rows) {
  std::vector<std::vector<double>> us(jobs.size());
  SampledToken t;
  const int vocab = static_cast<int>(x.size());
  for (int i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      SamplingJob job = jobs[j];
      job.u = static_cast<float>((i * 0.618034) - std::floor(i * 0.618034));
      const auto t0 = std::chrono::steady_clock::now();
      cpu::sample_rows(&t, x.data(), 1, vocab, &job, 1);
      us[j].push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      if (t.token < 0) throw std::runtime_error("bench_sampling: a row gave an error code");
    }
  std::vector<double> median;
  for (std::vector<double>& v : us) {
    std::nth_element(v.begin(), v.begin() + rows / 2, v.end());
    median.push_back(v[static_cast<std::size_t>(rows / 2)]);
  }
  return median;
}

/// Tokens in the nucleus of `job` over `x` (by the reference's full sort), and the candidates a
/// top-p < 1 draw keeps for it: those of p at least half of (1 - top_p) / (vocab - 1) * S (a draw
/// keeps a few more, from bounds on the S of its first chunks).
struct Nucleus {
  long tokens = 0;
  long candidates = 0;
};
Nucleus nucleus_size(const std::vector<float>& x, const SamplingJob& job) {
  std::vector<double> p(x.size());
  const double mx = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    sum += p[i] = std::exp((x[i] - mx) * static_cast<double>(job.inv_temperature));
  const double bound = 0.5 * (1.0 - job.top_p) / static_cast<double>(x.size() - 1) * sum;
  Nucleus n;
  n.candidates = std::count_if(p.begin(), p.end(), [&](double v) { return v >= bound; });
  std::sort(p.begin(), p.end(), std::greater<>());
  double mass = 0;
  n.tokens = static_cast<long>(p.size());
  for (std::size_t i = 0; i < p.size(); ++i)
    if ((mass += p[i]) > job.top_p * sum) {
      n.tokens = static_cast<long>(i) + 1;
      break;
    }
  return n;
}

}  // namespace
}  // namespace kvheap

int main(int argc, char** argv) {
  using namespace kvheap;
  CommandLine cli{"bench_sampling: a token from a row of logits, greedy or drawn, on one core"};
  int rows = 400;
  cli.option("--rows", rows, "Rows timed per configuration (the median is printed)").show_default();
  return run_cli(cli, argc, argv, [&] {
    if (rows < 1) throw UsageError("--rows must be at least 1");
    std::vector<Logits> shapes = {stories15m_logits(), normal_logits(128256, false),
                                  normal_logits(128256, true)};
    for (Logits& real : smollm2_logits()) shapes.push_back(std::move(real));

    const SamplingJob greedy{0, 0.0f, 1.0f, 0.0f}, top_p = draw_job(0, 0.8f, 0.9f, 0.0f),
                                                   full = draw_job(0, 0.8f, 1.0f, 0.0f);
    // Validate before timing: every draw is the full sort's, up to near ties.
    int near = 0;
    for (const Logits& s : shapes)
      for (SamplingJob job : {top_p, full})
        for (int i = 0; i < 40; ++i) {
          job.u = static_cast<float>(i) / 40.0f + 0.0123f;
          SampledToken t;
          cpu::sample_rows(&t, s.row.data(), 1, static_cast<int>(s.row.size()), &job, 1);
          const auto [want, is_near] = reference(s.row, job);
          if (t.token == want) continue;
          if (!is_near)
            throw std::runtime_error(fmt::format(
                "bench_sampling: {} (top_p {}, u {}) drew {} where the full sort gives {}", s.name,
                job.top_p, job.u, t.token, want));
          ++near;
        }
    fmt::print("every draw checked against a full sort of the vocabulary ({} near ties)\n\n", near);
    fmt::print(
        "| logits | vocab | greedy us/row | logits GB/s | T 0.8, top-p 0.9 us/row | x greedy | "
        "nucleus tokens | candidates | T 0.8, top-p 1 us/row | x greedy |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Logits& s : shapes) {
      const std::vector<double> t = time_rows(s.row, {greedy, top_p, full}, rows);
      const double g = t[0], p = t[1], f = t[2];
      // Napkin math: a greedy row reads vocab x 4 bytes once.
      const double gbps = static_cast<double>(s.row.size()) * 4.0 / (g * 1e-6) / 1e9;
      const Nucleus n = nucleus_size(s.row, top_p);
      fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {} | {} | {:.1f} | {:.2f} |\n",
                 s.name, s.row.size(), g, gbps, p, p / g, n.tokens, n.candidates, f, f / g);
    }
  });
}
