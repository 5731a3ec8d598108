// The start every GPU benchmark makes: its flags read before Google Benchmark's, then, once its
// benchmarks are registered, in this order: a
// listing needs no device; --model-only prints the roofline's prediction; the simulator is no
// performance model, so nothing is timed on it; without a device the program skips; otherwise
// the device's copy peak is measured in the same process, before anything is timed.
#pragma once

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <functional>
#include <optional>
#include <span>
#include <string>

#include "bench/support/command.hpp"
#include "bench/support/roofline_model.hpp"
#include "common/measure/cuda/device_bandwidth.hpp"
#include "device/device.hpp"

namespace kvheap::bench {

/// \brief What a GPU benchmark's main() reads of its own command line.
struct GpuBenchmarkFlags {
  bool listing = false;  ///< --benchmark_list_tests: list, time nothing
  ModelFlags model;      ///< --model-only and --gpu
};

/// \brief Reads `program`'s own flags, then lets Google Benchmark take its own
/// (benchmark::Initialize). For a bad --gpu it prints why and returns nothing: main returns 2.
inline std::optional<GpuBenchmarkFlags> read_gpu_benchmark_flags(const char* program, int& argc,
                                                                 char** argv) {
  const ModelFlags model = model_flags(argc, argv);
  if (!model.error.empty()) {
    fmt::print(stderr, "{}: {}\n", program, model.error);
    return std::nullopt;
  }
  return GpuBenchmarkFlags{initialize(argc, argv), model};
}

/// \brief Registers `run(state, batch, ctx)` for every batch of `batches` and context of
/// `contexts`, named `name(batch, ctx)`, each timed by the benchmark itself (manual time, in
/// microseconds, for at least 0.2 s).
template <class Name, class Run>
void register_batch_by_context(std::span<const int> batches, std::span<const int> contexts,
                               Name name, Run run) {
  for (const int batch : batches)
    for (const int ctx : contexts)
      benchmark::RegisterBenchmark(name(batch, ctx).c_str(),
                                   [run, batch, ctx](benchmark::State& s) { run(s, batch, ctx); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.2);
}

/// \brief How a GPU benchmark's start ended.
struct GpuStart {
  std::optional<int> exit_code;  ///< set: main returns it now, having timed nothing
  DeviceInfo info;               ///< otherwise the device to time on
  BandwidthSample peak;          ///< and its device-to-device copy peak, measured just now
};

/// \brief The start of `program` (its name in messages): see the file comment. `print_model`
/// prints --model-only's table for a datasheet; `cpu_twin`, when given, names the benchmark that
/// measures the CPU twin, for the simulator's message.
inline GpuStart start_gpu_benchmark(const char* program, bool listing, const ModelFlags& model,
                                    const std::function<int(const GpuDatasheet&)>& print_model,
                                    const char* cpu_twin = nullptr) {
  GpuStart s;
  if (listing) {
    s.exit_code = list_benchmarks();  // the names are the same on every machine
  } else if (model.only) {
    s.exit_code = print_model(*model_gpu(model, ""));
  } else if (is_simulator()) {
    fmt::print(
        "{}: KVHEAP_CUDA=sim runs kernels on the CPU simulator, which is not a performance "
        "model; no timings are reported. Build with KVHEAP_CUDA=real and run on a GPU "
        "({}--model-only prints the roofline's prediction here).\n",
        program, cpu_twin ? fmt::format("{} measures the CPU twin; ", cpu_twin) : std::string());
    s.exit_code = 0;
  } else if (auto why = device_unavailable_reason()) {
    fmt::print("{}: skipped, {}\n", program, *why);
    s.exit_code = 0;
  } else {
    s.info = device_info();
    s.peak = measure_copy_bandwidth();
  }
  return s;
}

}  // namespace kvheap::bench
