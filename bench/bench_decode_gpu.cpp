// bench_decode_gpu: chapter 2's end-to-end decode step on the device, against the
// device-to-device copy bandwidth measured in the same process.
//
// Model: the Llama-3-8B shape with 4 layers (llama-3-8b-4l, synthetic weights), so that weights
// (~3.6 GB in bf16 with the 1 GB embedding and classifier) and KV both matter and it fits any
// 24 GB+ GPU. Per step: weights read once + K and V of every cached position of every sequence.
//
// A plain program, not a Google Benchmark one: it sweeps its own grid and times a fixed number of
// steps each. It prints a markdown table, and with --json-out=PATH writes the same rows as JSON.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "chapters/02_contiguous_gpu/contiguous_cache.hpp"
#include "common/cli.hpp"
#include "common/gpu/device_bandwidth.hpp"
#include "common/gpu/forward_gpu.hpp"
#include "common/report.hpp"
#include "common/synthetic_weights.hpp"
#include "device/device.hpp"

namespace {

using namespace kvheap;

/// Runs the grid, printing a markdown row per configuration; returns the rows as JSON.
nlohmann::json run(const DeviceInfo& info) {
  const double peak = measure_copy_bandwidth().gbps;
  fmt::print("device {} ({} SMs), device-to-device copy peak {:.1f} GB/s\n\n", info.name,
             info.sm_count, peak);
  nlohmann::json out = {{"device", info.name},
                        {"sm_count", info.sm_count},
                        {"copy_peak_gbps", peak},
                        {"rows", nlohmann::json::array()}};
  const ModelConfig c = preset("llama-3-8b-4l");
  const ModelWeights host = make_synthetic_weights(c, 1);
  fmt::print(
      "| config | KV budget MB | MB moved/step | ms/step | GB/s | % of copy peak | tokens/s |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|\n");
  for (DType dt : {DType::BF16, DType::F32}) {
    GpuForward fwd(host, dt);
    for (int batch : {1, 16}) {
      for (int ctx : {1024, 4096}) {
        ch02::ContiguousCache cache(c, dt, batch, Memory::kDevice);
        Batch prefill, step;
        for (int s = 0; s < batch; ++s) {
          const int slot = cache.admit();
          // Prefill in chunks so activations stay small.
          for (int p0 = 0; p0 < ctx; p0 += 512) {
            prefill.rows.clear();
            for (int p = p0; p < std::min(ctx, p0 + 512); ++p)
              prefill.rows.push_back({(p * 13 + s) % c.vocab_size, slot, p, false});
            (void)fwd.forward(prefill, cache);
          }
          step.rows.push_back({1, slot, ctx, true});
        }
        (void)fwd.forward_greedy(step, cache);  // warm-up
        Event start, stop;
        const int iters = 20;
        start.record();
        for (int i = 0; i < iters; ++i) (void)fwd.forward_greedy(step, cache);
        stop.record();
        const double ms = elapsed_ms(start, stop) / iters;
        // Napkin math: weights once for the whole batch + K and V of ctx + 1 positions per row.
        const double bytes = static_cast<double>(weight_bytes_per_decode_step(c, dt)) +
                             static_cast<double>(batch) * kv_bytes_for_context(c, dt, ctx + 1);
        const double gbps = bytes / (ms * 1e-3) / 1e9;
        fmt::print(
            "| {} {} batch {} ctx {} | {:.0f} | {:.0f} | {:.3f} | {:.0f} | {:.1f} | {:.0f} |\n",
            c.name, dtype_name(dt), batch, ctx, cache.bytes_reserved() / 1e6, bytes / 1e6, ms, gbps,
            100.0 * gbps / peak, batch * 1e3 / ms);
        out["rows"].push_back({{"model", c.name},
                               {"dtype", dtype_name(dt)},
                               {"batch", batch},
                               {"ctx", ctx},
                               {"kv_reserved_bytes", cache.bytes_reserved()},
                               {"bytes_per_step", bytes},
                               {"ms_per_step", ms},
                               {"gbps", gbps},
                               {"frac_of_copy_peak", gbps / peak},
                               {"tokens_per_s", batch * 1e3 / ms}});
      }
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CommandLine cli{"chapter 2's decode step on the GPU against its copy bandwidth",
                  "bench_decode_gpu"};
  std::string json_out;
  cli.option("--json-out", json_out, "Also write the rows as JSON to this file");
  return run_cli(cli, argc, argv, [&] {
    const DeviceInfo info = require_cuda_device();
    if (info.is_simulator) {
      fmt::print("bench_decode_gpu: {} is not a performance model; run this on a GPU\n", info.name);
      return;
    }
    const nlohmann::json report = run(info);
    if (!json_out.empty()) {
      std::ofstream f(json_out);
      f << report.dump(2) << "\n";
      if (!f) throw ResourceError("cannot write " + json_out);
    }
  });
}
