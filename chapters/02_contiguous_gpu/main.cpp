// ch02_contiguous_gpu: chapter 1's decoder and reservation policy on the GPU (or on the CPU twins
// with --device cpu), reporting bytes moved per decode step against a peak measured at start.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "base/error.hpp"
#include "chapters/01_cpu_reference/reserved_cache.hpp"
#include "common/bandwidth.hpp"
#include "common/cli.hpp"
#include "common/forward_cpu.hpp"
#include "common/generate.hpp"
#include "common/model_loader.hpp"
#include "common/report.hpp"
#include "common/tokenizer.hpp"

#if KVHEAP_HAS_CUDA
#include "chapters/02_contiguous_gpu/contiguous_cache.hpp"
#include "common/gpu/device_bandwidth.hpp"
#include "common/gpu/forward_gpu.hpp"
#include "device/device.hpp"
#endif

using namespace kvheap;

namespace {

/// --device auto|cpu|cuda resolved against what this build and machine have.
std::string resolve_device(const std::string& requested) {
  if (requested != "auto" && requested != "cpu" && requested != "cuda")
    throw UsageError(fmt::format("--device {}: expected auto, cpu or cuda", requested));
#if KVHEAP_HAS_CUDA
  if (requested == "auto") return device_count() > 0 ? "cuda" : "cpu";
#else
  if (requested == "cuda")
    throw ResourceError(
        "--device cuda: this build has no CUDA support (configured with "
        "KVHEAP_CUDA=off); rebuild with the cuda or sim preset, or use --device cpu");
  if (requested == "auto") return "cpu";
#endif
  return requested;
}

/// The CPU backend: chapter 1's forward pass and reservation, whose attention is the CPU twin of
/// this chapter's kernel.
GenerationResult run_cpu(const ModelWeights& w, DType kv, std::size_t budget,
                         const std::vector<int>& prompt, const GenerationConfig& gen,
                         DecodeReport& rep) {
  ch01::ReservedCache cache(w.config, kv, budget);
  const int slot = cache.admit();
  CpuForward fwd(w);
  GenerationResult r = generate(fwd, cache, slot, prompt, gen);
  rep.kv_reserved_bytes = cache.bytes_reserved();
  rep.kv_used_bytes = cache.bytes_used();
  return r;
}

#if KVHEAP_HAS_CUDA
GenerationResult run_cuda(const ModelWeights& w, DType kv, DType wt, std::size_t budget,
                          const std::vector<int>& prompt, const GenerationConfig& gen,
                          DecodeReport& rep) {
  const int slots =
      budget > 0 ? ch02::ContiguousGpuCache::slots_for_budget(w.config, kv, budget) : 1;
  ch02::ContiguousGpuCache cache(w.config, kv, slots);
  const int slot = cache.admit();
  GpuForward fwd(w, wt);
  GenerationResult r;
  if (gen.sampling.temperature == 0.0f) {
    // Greedy: the argmax runs on the device and only one id per step comes back.
    r = generate_with([&](const Batch& b) { return fwd.forward_greedy(b, cache).back(); }, w.config,
                      slot, prompt, gen);
  } else {
    r = generate([&](const Batch& b) { return fwd.forward(b, cache); }, w.config, slot, prompt,
                 gen);
  }
  rep.kv_reserved_bytes = cache.bytes_reserved();
  rep.kv_used_bytes = cache.bytes_used();
  return r;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CommandLine cli{"kvheap chapter 2: the contiguous per-sequence cache on the GPU",
                  "ch02_contiguous_gpu"};
  CommonOptions o;
  o.device = "auto";
  add_common_options(cli, o);
  std::string weight_dtype = "fp32";
  bool no_peak = false;
  cli.option("--weight-dtype", weight_dtype, "Weights on the device: fp32, fp16 or bf16")
      .show_default();
  cli.flag("--no-peak", no_peak, "Skip measuring the bandwidth peak at start");

  return run_cli(cli, argc, argv, [&] {
    const std::string device = resolve_device(o.device);
    const DType kv = parse_dtype(o.kv_dtype);
    const DType wt = parse_dtype(weight_dtype);
    if (device == "cpu" && wt != DType::F32)
      throw UsageError(
          fmt::format("--weight-dtype {} needs --device cuda: the CPU backend "
                      "computes with fp32 weights",
                      weight_dtype));
    const std::size_t budget = kv_budget_bytes(o);
    const int threads = apply_threads(o);
    const ModelWeights weights = load_model(o.model, o.model_seed);
    const ModelConfig& c = weights.config;
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(o, c);
    const std::vector<int> prompt = resolve_prompt(o, c, tok.get());
    check_generation_fits(prompt.size(), o.max_new_tokens, c);
    const GenerationConfig gen{o.max_new_tokens, sampler_config(o), o.ignore_eos};

    DecodeReport rep;
    rep.chapter = "02_contiguous_gpu";
    rep.model = c.name;
    rep.kv_dtype = kv;
    rep.weight_dtype = wt;
    if (device == "cpu") {
      rep.device = fmt::format("cpu ({} threads)", threads);
      if (!no_peak) {
        rep.peak = cpu_read_peak();
      }
      rep.run = run_cpu(weights, kv, budget, prompt, gen, rep);
    } else {
#if KVHEAP_HAS_CUDA
      const DeviceInfo info = require_cuda_device();
      rep.device = info.is_simulator ? info.name + " (not a performance model)" : info.name;
      if (!no_peak && !info.is_simulator) {
        rep.peak = gpu_copy_peak();
      }
      rep.run = run_cuda(weights, kv, wt, budget, prompt, gen, rep);
#endif
    }
    fill_bytes(rep, c);

    print_run(rep, c, tok.get(), o.json, std::cout);
  });
}
