// ch01_cpu_reference: generate with the CPU decoder and the naive reservation policy, and report
// tokens/s, KV reserved vs used, bytes per decode step and achieved bandwidth.
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

using namespace kvheap;

namespace {

/// Physical memory of the host in bytes: the most a KV budget on the CPU could ever hold.
double host_memory_bytes() {
  const std::size_t bytes = physical_memory_bytes();
  if (bytes == 0)
    throw ResourceError("cannot read this host's physical memory size (sysconf failed)");
  return static_cast<double>(bytes);
}

}  // namespace

int main(int argc, char** argv) {
  CommandLine cli{"kvheap chapter 1: the CPU reference decoder with max_seq_len reservation",
                  "ch01_cpu_reference"};
  CommonOptions o;
  add_common_options(cli, o);
  bool no_peak = false;
  cli.flag("--no-peak", no_peak, "Skip measuring the read-bandwidth peak at start");

  return run_cli(cli, argc, argv, [&] {
    if (o.device != "cpu")
      throw UsageError(
          fmt::format("--device {}: chapter 1 runs on the CPU only (cuda arrives in "
                      "chapter 2); expected --device cpu",
                      o.device));
    const DType kv = parse_dtype(o.kv_dtype);
    const std::size_t budget = kv_budget_bytes(o);
    // A budget the host cannot back is a promise the cache would break mid-run; refuse it before
    // the model is loaded.
    const double host_mb = host_memory_bytes() / 1e6;
    if (o.kv_budget_mb > host_mb)
      throw ResourceError(
          fmt::format("--kv-budget-mb {} asks for more than this host's "
                      "physical memory ({:.0f} MB)",
                      o.kv_budget_mb, host_mb));
    const int threads = apply_threads(o);
    const ModelWeights weights = load_model(o.model, o.model_seed);
    const ModelConfig& c = weights.config;
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(o, c);
    const std::vector<int> prompt = resolve_prompt(o, c, tok.get());
    check_generation_fits(prompt.size(), o.max_new_tokens, c);

    DecodeReport rep;
    rep.chapter = "01_cpu_reference";
    rep.model = c.name;
    rep.device = fmt::format("cpu ({} threads)", threads);
    rep.kv_dtype = kv;
    if (!no_peak) {
      rep.peak = cpu_read_peak();
    }

    ch01::ReservedCache cache(c, kv, budget);
    const int slot = cache.admit();
    CpuForward fwd(weights);
    GenerationConfig gen{o.max_new_tokens, sampler_config(o), o.ignore_eos};
    rep.run = generate(fwd, cache, slot, prompt, gen);
    rep.kv_reserved_bytes = cache.bytes_reserved();
    rep.kv_used_bytes = cache.bytes_used();
    fill_bytes(rep, c);

    print_run(rep, c, tok.get(), o.json, std::cout);
  });
}
