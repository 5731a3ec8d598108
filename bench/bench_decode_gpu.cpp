// bench_decode_gpu: chapter 2's end-to-end decode step on the device, against the
// device-to-device copy bandwidth measured in the same process.
//
// Model: the Llama-3-8B shape with 4 layers (llama-3-8b-4l, synthetic weights), so that weights
// (~3.6 GB in bf16 with the 1 GB embedding and classifier) and KV both matter and it fits any
// 24 GB+ GPU. Per step: weights read once + K and V of every cached position of every sequence.
//
// A plain program, not a Google Benchmark one: it sweeps its own grid and times a fixed number of
// steps each. It prints a markdown table, and with --json-out=PATH writes the same rows as JSON.
// Beside each measured step the table prints the roofline's prediction from the GPU's datasheet
// (bench/support/roofline_model.hpp), labelled as a model; --model-only prints the model alone, on
// any machine, the simulator included (where nothing is timed).
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "bench/support/roofline_model.hpp"
#include "chapters/02_contiguous_gpu/contiguous_cache.hpp"
#include "common/program/cli.hpp"
#include "common/measure/cuda/device_bandwidth.hpp"
#include "common/forward/cuda/forward_gpu.hpp"
#include "common/serving/report.hpp"
#include "common/model/synthetic_weights.hpp"
#include "device/device.hpp"

namespace {

using namespace kvheap;

constexpr DType kDtypes[] = {DType::BF16, DType::F32};
constexpr int kBatches[] = {1, 16};
constexpr int kContexts[] = {1024, 4096};

std::string config_name(const ModelConfig& c, DType dt, int batch, int ctx) {
  return fmt::format("{} {} batch {} ctx {}", c.name, dtype_name(dt), batch, ctx);
}

/// --model-only: the roofline's step time for every configuration, on `gpu`, and nothing timed.
void print_model(const bench::GpuDatasheet& gpu) {
  const ModelConfig c = preset("llama-3-8b-4l");
  fmt::print("bench_decode_gpu: model only, nothing timed. {}\n\n", bench::model_note(&gpu, ""));
  fmt::print(
      "| config | MB moved/step | FP32 GFLOP | tensor GFLOP | model ms/step | bound | model "
      "tokens/s |\n|---|---:|---:|---:|---:|---|---:|\n");
  for (DType dt : kDtypes) {
    for (int batch : kBatches) {
      for (int ctx : kContexts) {
        const bench::Work w = bench::decode_step_work(c, dt, batch, ctx);
        const bench::Prediction p = bench::predict(w, gpu);
        fmt::print("| {} | {:.0f} | {:.1f} | {:.1f} | {:.3f} | {} | {:.0f} |\n",
                   config_name(c, dt, batch, ctx), w.bytes / 1e6, w.fp32_flops / 1e9,
                   w.tensor_flops / 1e9, p.seconds * 1e3, p.bound, batch / p.seconds);
      }
    }
  }
}

/// Runs the grid, printing a markdown row per configuration, with the model from `gpu` (none
/// when null); returns the rows as JSON.
nlohmann::json run(const DeviceInfo& info, const bench::GpuDatasheet* gpu) {
  const double peak = measure_copy_bandwidth().gbps;
  fmt::print("device {} ({} SMs), device-to-device copy peak {:.1f} GB/s\n{}\n\n", info.name,
             info.sm_count, peak, bench::model_note(gpu, info.name));
  nlohmann::json out = {{"device", info.name},
                        {"sm_count", info.sm_count},
                        {"copy_peak_gbps", peak},
                        {"rows", nlohmann::json::array()}};
  const ModelConfig c = preset("llama-3-8b-4l");
  const ModelWeights host = make_synthetic_weights(c, 1);
  fmt::print(
      "| config | KV budget MB | MB moved/step | ms/step | model ms/step | measured / model | GB/s "
      "| % of copy peak | tokens/s |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (DType dt : kDtypes) {
    GpuForward fwd(host, dt);
    for (int batch : kBatches) {
      for (int ctx : kContexts) {
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
        std::vector<SamplingJob> greedy;  // one greedy token per row, chosen on the device
        for (int s = 0; s < batch; ++s) greedy.push_back({s, 0.0f, 1.0f, 0.0f});
        (void)fwd.forward(step, cache, greedy);  // warm-up
        Event start, stop;
        const int iters = 20;
        start.record();
        for (int i = 0; i < iters; ++i) (void)fwd.forward(step, cache, greedy);
        stop.record();
        const double ms = elapsed_ms(start, stop) / iters;
        // Napkin math: weights once for the whole batch + K and V of ctx + 1 positions per row.
        const bench::Work work = bench::decode_step_work(c, dt, batch, ctx);
        const double bytes = work.bytes;
        const double gbps = bytes / (ms * 1e-3) / 1e9;
        const std::string model_ms =
            gpu == nullptr ? "-" : fmt::format("{:.3f}", bench::predict(work, *gpu).seconds * 1e3);
        fmt::print("| {} | {:.0f} | {:.0f} | {:.3f} | {} | {} | {:.0f} | {:.1f} | {:.0f} |\n",
                   config_name(c, dt, batch, ctx), cache.bytes_reserved() / 1e6, bytes / 1e6, ms,
                   model_ms, bench::measured_over_model(gpu, work, ms * 1e-3), gbps,
                   100.0 * gbps / peak, batch * 1e3 / ms);
        nlohmann::json model = nullptr;  // a prediction, kept apart from the measured fields
        if (gpu != nullptr) {
          const bench::Prediction p = bench::predict(work, *gpu);
          model = {{"datasheet", gpu->name}, {"ms_per_step", p.seconds * 1e3}, {"bound", p.bound}};
        }
        out["rows"].push_back({{"model", c.name},
                               {"dtype", dtype_name(dt)},
                               {"batch", batch},
                               {"ctx", ctx},
                               {"kv_reserved_bytes", cache.bytes_reserved()},
                               {"bytes_per_step", bytes},
                               {"ms_per_step", ms},
                               {"gbps", gbps},
                               {"frac_of_copy_peak", gbps / peak},
                               {"tokens_per_s", batch * 1e3 / ms},
                               {"roofline_model", model}});
      }
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CommandLine cli{"chapter 2's decode step on the GPU against its copy bandwidth",
                  "bench_decode_gpu"};
  std::string json_out, model_gpu;
  bool model_only = false;
  cli.option("--json-out", json_out, "Also write the rows as JSON to this file");
  cli.flag("--model-only", model_only,
           "Print the roofline's prediction for every configuration and time nothing (any "
           "machine)");
  cli.option("--model-gpu", model_gpu,
             "Datasheet of the model: " + bench::datasheet_keys() +
                 " (default: the device's own; with --model-only, h200)");
  return run_cli(cli, argc, argv, [&] {
    bench::ModelFlags flags;
    flags.only = model_only;
    if (!model_gpu.empty()) flags.key = model_gpu;
    if (flags.key && bench::datasheet_by_key(*flags.key) == nullptr)
      throw UsageError(fmt::format("--model-gpu {}: no datasheet by that name; the model knows {}",
                                   model_gpu, bench::datasheet_keys()));
    if (model_only) {
      print_model(*bench::model_gpu(flags, ""));
      return;
    }
    const DeviceInfo info = require_cuda_device();
    if (info.is_simulator) {
      fmt::print(
          "bench_decode_gpu: {} is not a performance model; run this on a GPU (--model-only "
          "prints the roofline's prediction here)\n",
          info.name);
      return;
    }
    const nlohmann::json report = run(info, bench::model_gpu(flags, info.name));
    if (!json_out.empty()) {
      std::ofstream f(json_out);
      f << report.dump(2) << "\n";
      f.close();  // a full disk shows only when the buffer is flushed
      if (!f) throw ResourceError("cannot write " + json_out);
    }
  });
}
