// The roofline as a model of the GPU benchmarks: from the bytes a call must move and the flops it
// must do, the time a GPU's datasheet figures allow, max(bytes / memory bandwidth, flops / peak
// rate). The GPU benchmarks print it beside each measured row, labelled as a model, and print it
// alone with --model-only on any machine (the simulator included, where nothing is timed).
// docs/pages/gpu_performance_model.md explains the model and what it leaves out.
//
// The figures are NVIDIA's datasheet numbers, not measurements: the H200's are what the first GPU
// run is predicted with. A run on a GPU with no datasheet here prints no model unless asked for
// one with --model-gpu=KEY.
#pragma once

#include <fmt/format.h>

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "common/model/model_config.hpp"
#include "common/serving/report.hpp"

namespace kvheap::bench {

/// \brief A GPU's datasheet figures, the model's only inputs besides the work.
struct GpuDatasheet {
  std::string_view key;          ///< the --model-gpu value: "h200"
  std::string_view name;         ///< "NVIDIA H200 SXM"
  std::string_view device_name;  ///< how the CUDA runtime's name for it begins: "NVIDIA H200"
  double memory_gbps;            ///< peak memory bandwidth, GB/s (1e9 B/s)
  double fp32_tflops;            ///< peak FP32 on the CUDA cores, dense
  double bf16_tensor_tflops;     ///< peak BF16 on the tensor cores, dense (half the sparse figure)
  int sm_count;                  ///< streaming multiprocessors
};

/// \brief The GPUs the model knows, from NVIDIA's datasheets (H100 and H200 Tensor Core GPU, SXM):
/// the same GH100 chip with 132 SMs, HBM3 at 3.35 TB/s or HBM3e at 4.8 TB/s.
inline constexpr std::array<GpuDatasheet, 2> kDatasheets{{
    {"h200", "NVIDIA H200 SXM", "NVIDIA H200", 4800.0, 67.0, 989.0, 132},
    {"h100", "NVIDIA H100 SXM", "NVIDIA H100 80GB HBM3", 3350.0, 67.0, 989.0, 132},
}};

/// \brief The datasheet whose --model-gpu key is `key`, or nothing.
inline const GpuDatasheet* datasheet_by_key(std::string_view key) {
  for (const GpuDatasheet& d : kDatasheets)
    if (d.key == key) return &d;
  return nullptr;
}

/// \brief The datasheet of the device the CUDA runtime calls `device_name`, or nothing (another
/// GPU, the simulator). The SXM boards' names begin "NVIDIA H200" and "NVIDIA H100" and may go on
/// with the memory ("NVIDIA H100 80GB HBM3"); the PCIe and NVL boards of the same chip, whose
/// clocks, power and (H100) memory differ, say so in their names and get no datasheet.
inline const GpuDatasheet* datasheet_of_device(std::string_view device_name) {
  if (device_name.find("PCIe") != std::string_view::npos ||
      device_name.find("NVL") != std::string_view::npos)
    return nullptr;
  for (const GpuDatasheet& d : kDatasheets) {
    if (device_name.substr(0, d.device_name.size()) != d.device_name) continue;
    const std::string_view rest = device_name.substr(d.device_name.size());
    if (rest.empty() || rest[0] == ' ') return &d;  // not "NVIDIA H1000"
  }
  return nullptr;
}

/// \brief The --model-gpu keys, for messages: "h200, h100".
inline std::string datasheet_keys() {
  std::string keys;
  for (const GpuDatasheet& d : kDatasheets) keys += (keys.empty() ? "" : ", ") + std::string(d.key);
  return keys;
}

/// \brief What one call must do: bytes that cross the memory bus at least once, and flops by the
/// units that do them.
struct Work {
  double bytes = 0.0;         ///< compulsory memory traffic
  double fp32_flops = 0.0;    ///< on the CUDA cores (attention, fp32 GEMMs without TF32)
  double tensor_flops = 0.0;  ///< on the tensor cores (bf16 GEMMs)
};

/// \brief The roofline's time for some work, and which roof sets it.
struct Prediction {
  double seconds = 0.0;
  std::string_view bound;  ///< "memory", "FP32" or "tensor"
};

/// \brief max(bytes / bandwidth, FP32 flops / FP32 rate, tensor flops / tensor rate) on `gpu`.
inline Prediction predict(const Work& w, const GpuDatasheet& gpu) {
  Prediction p{w.bytes / (gpu.memory_gbps * 1e9), "memory"};
  const double fp32 = w.fp32_flops / (gpu.fp32_tflops * 1e12);
  const double tensor = w.tensor_flops / (gpu.bf16_tensor_tflops * 1e12);
  if (fp32 > p.seconds) p = {fp32, "FP32"};
  if (tensor > p.seconds) p = {tensor, "tensor"};
  return p;
}

/// \brief Decode attention's work: each row reads K and V of its `n_ctx` positions (`kv_bytes`
/// per element) and does a dot product and an accumulation per position and query head, 4 flops
/// per element of head_dim; `io_bytes` are the queries read and outputs written.
inline Work attention_work(double positions, int n_heads, int n_kv_heads, int head_dim,
                           double kv_bytes, double io_bytes) {
  Work w;
  w.bytes = positions * 2.0 * n_kv_heads * head_dim * kv_bytes + io_bytes;
  w.fp32_flops = positions * 4.0 * n_heads * head_dim;
  return w;
}

/// \brief A decode step's work on `c` with weights and KV cache in `dt`: every weight read once
/// for the batch (weight_bytes_per_decode_step) and K and V of `ctx` + 1 positions per row; the
/// GEMMs' 2 flops per weight per row on the tensor cores for 16-bit weights (cuBLAS with fp32
/// accumulation), on the CUDA cores for fp32 (no TF32), and attention's on the CUDA cores.
inline Work decode_step_work(const ModelConfig& c, DType dt, int batch, int ctx) {
  const double weight_bytes = static_cast<double>(weight_bytes_per_decode_step(c, dt));
  Work w;
  w.bytes = weight_bytes + batch * static_cast<double>(kv_bytes_for_context(c, dt, ctx + 1));
  const double gemm = 2.0 * (weight_bytes / static_cast<double>(dtype_size(dt))) * batch;
  (dt == DType::F32 ? w.fp32_flops : w.tensor_flops) += gemm;
  w.fp32_flops +=
      static_cast<double>(batch) * (ctx + 1) * 4.0 * c.n_heads * c.head_dim * c.n_layers;
  return w;
}

/// \brief The model's flags, read before Google Benchmark's: --model-only prints the model and
/// times nothing; --model-gpu=KEY picks a datasheet (by default the device's own, and with
/// --model-only the H200's). `error` names a bad key.
struct ModelFlags {
  bool only = false;
  std::optional<std::string> key;
  std::string error;
};

/// \brief Reads ModelFlags from the command line.
inline ModelFlags model_flags(int argc, char** argv) {
  ModelFlags f;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--model-only") f.only = true;
    if (a.substr(0, 12) == "--model-gpu=") f.key = std::string(a.substr(12));
  }
  if (f.key && datasheet_by_key(*f.key) == nullptr)
    f.error = fmt::format("--model-gpu={}: no datasheet by that name; the model knows {}", *f.key,
                          datasheet_keys());
  return f;
}

/// \brief The datasheet a run compares against: the one --model-gpu named, else with
/// --model-only the H200's, else the device's own (nothing for a GPU the model does not know).
inline const GpuDatasheet* model_gpu(const ModelFlags& f, std::string_view device_name) {
  if (f.key) return datasheet_by_key(*f.key);
  if (f.only) return datasheet_by_key("h200");
  return datasheet_of_device(device_name);
}

/// \brief One line that says what the model columns are, to print above a table: a model from
/// `gpu`'s datasheet, never a measurement, and when it is not the device's own datasheet, so.
inline std::string model_note(const GpuDatasheet* gpu, std::string_view device_name) {
  if (gpu == nullptr)
    return fmt::format(
        "No model: no datasheet for {}; --model-gpu={} compares against one of those.", device_name,
        datasheet_keys());
  std::string note = fmt::format(
      "\"model\" columns are a prediction, not a measurement: the roofline, max(bytes / {:.0f} "
      "GB/s, FP32 flops / {:.0f} TFLOPS, BF16 tensor flops / {:.0f} TFLOPS), from the {} "
      "datasheet (docs/pages/gpu_performance_model.md).",
      gpu->memory_gbps, gpu->fp32_tflops, gpu->bf16_tensor_tflops, gpu->name);
  if (!device_name.empty() && gpu->device_name != device_name)
    note += fmt::format(" This device is {}, not that GPU.", device_name);
  return note;
}

/// \brief A model column's cell: the predicted time in microseconds, or "-" without a datasheet.
inline std::string model_us(const GpuDatasheet* gpu, const Work& w) {
  return gpu == nullptr ? std::string("-") : fmt::format("{:.1f}", predict(w, *gpu).seconds * 1e6);
}

/// \brief A "measured / model" cell: how many times the roofline's time the call took, or "-".
inline std::string measured_over_model(const GpuDatasheet* gpu, const Work& w, double seconds) {
  if (gpu == nullptr) return "-";
  return fmt::format("{:.2f}", seconds / predict(w, *gpu).seconds);
}

}  // namespace kvheap::bench
