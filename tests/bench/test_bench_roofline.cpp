// The roofline model the GPU benchmarks print beside their measurements
// (bench/support/roofline_model.hpp): its times against the napkin math done by hand from the
// datasheet figures, which roof it names, the decode step's work by weight type, and which
// datasheet a run compares against.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/support/roofline_model.hpp"
#include "common/model/model_config.hpp"
#include "common/serving/report.hpp"

namespace kvheap {
namespace {

const bench::GpuDatasheet& h200() { return *bench::datasheet_by_key("h200"); }

// Llama-3-8B heads (32 query, 8 KV, head_dim 128), bf16 KV, one sequence of 32768 positions:
// K and V are 32768 x 2 x 8 x 128 x 2 B = 134217728 B, q and out 2 x 32 x 128 x 4 B = 32768 B;
// at 4.8e12 B/s that is 134250496 / 4.8e12 s = 27.969 us. The flops, 32768 x 4 x 32 x 128 =
// 0.537 GFLOP, would take 8.0 us at 67 TFLOPS: the memory roof sets the time.
TEST(BenchRoofline, AttentionOnTheH200IsItsBytesOverHbmBandwidth) {
  const bench::Work w = bench::attention_work(32768, 32, 8, 128, 2.0, 2.0 * 32 * 128 * 4);
  EXPECT_DOUBLE_EQ(w.bytes, 134250496.0);
  EXPECT_DOUBLE_EQ(w.fp32_flops, 536870912.0);
  const bench::Prediction p = bench::predict(w, h200());
  EXPECT_NEAR(p.seconds * 1e6, 27.969, 0.001);
  EXPECT_EQ(p.bound, "memory");
  EXPECT_EQ(bench::model_us(&h200(), w), "28.0");
  // Taking exactly the predicted time is 1.00x the model; twice it, 2.00x.
  EXPECT_EQ(bench::measured_over_model(&h200(), w, p.seconds), "1.00");
  EXPECT_EQ(bench::measured_over_model(&h200(), w, 2 * p.seconds), "2.00");
  // The H100's HBM3 (3.35 TB/s) makes the same work 4.8 / 3.35 times slower.
  const bench::Prediction h100 = bench::predict(w, *bench::datasheet_by_key("h100"));
  EXPECT_NEAR(h100.seconds / p.seconds, 4800.0 / 3350.0, 1e-12);
}

TEST(BenchRoofline, TheSlowestRoofSetsTheTimeAndIsNamed) {
  bench::Work w;
  w.bytes = 4.8e9;         // 1 ms at 4.8 TB/s
  w.fp32_flops = 134e9;    // 2 ms at 67 TFLOPS
  w.tensor_flops = 989e9;  // 1 ms at 989 TFLOPS
  bench::Prediction p = bench::predict(w, h200());
  EXPECT_NEAR(p.seconds, 2e-3, 1e-12);
  EXPECT_EQ(p.bound, "FP32");
  w.tensor_flops = 3 * 989e9;  // 3 ms
  p = bench::predict(w, h200());
  EXPECT_NEAR(p.seconds, 3e-3, 1e-12);
  EXPECT_EQ(p.bound, "tensor");
  EXPECT_EQ(bench::predict(bench::Work{4.8e9, 1.0, 1.0}, h200()).bound, "memory");
}

// A decode step reads every weight once for the batch and each row's K and V; its GEMMs run on
// the tensor cores for bf16 weights and on the CUDA cores for fp32 ones.
TEST(BenchRoofline, DecodeStepWorkFollowsTheWeightType) {
  const ModelConfig c = preset("llama-3-8b-4l");
  const double weights_bf16 = static_cast<double>(weight_bytes_per_decode_step(c, DType::BF16));
  const double kv_row = static_cast<double>(kv_bytes_for_context(c, DType::BF16, 1025));
  const bench::Work one = bench::decode_step_work(c, DType::BF16, 1, 1024);
  const bench::Work sixteen = bench::decode_step_work(c, DType::BF16, 16, 1024);
  EXPECT_DOUBLE_EQ(one.bytes, weights_bf16 + kv_row);
  EXPECT_DOUBLE_EQ(sixteen.bytes, weights_bf16 + 16 * kv_row);
  EXPECT_DOUBLE_EQ(one.tensor_flops, 2.0 * weights_bf16 / 2.0);  // 2 flops per bf16 weight
  EXPECT_DOUBLE_EQ(sixteen.tensor_flops, 16 * one.tensor_flops);
  // Attention only on the CUDA cores: 4 flops per head element per position, every layer.
  EXPECT_DOUBLE_EQ(one.fp32_flops, 1025.0 * 4 * c.n_heads * c.head_dim * c.n_layers);

  const bench::Work fp32 = bench::decode_step_work(c, DType::F32, 16, 1024);
  EXPECT_EQ(fp32.tensor_flops, 0.0);
  EXPECT_DOUBLE_EQ(fp32.fp32_flops,
                   sixteen.tensor_flops + 16 * 1025.0 * 4 * c.n_heads * c.head_dim * c.n_layers);
  // At batch 1 the weights are nearly all the bytes, so the bf16 step is predicted at about their
  // read time, and the fp32 step at about twice it.
  const double bf16 = bench::predict(one, h200()).seconds;
  EXPECT_NEAR(bf16, weights_bf16 / 4.8e12, 0.02 * bf16);
  EXPECT_NEAR(bench::predict(bench::decode_step_work(c, DType::F32, 1, 1024), h200()).seconds,
              2 * bf16, 0.02 * bf16);
}

/// ModelFlags of a command line.
bench::ModelFlags flags(std::vector<std::string> args) {
  args.insert(args.begin(), "bench_x");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return bench::model_flags(static_cast<int>(argv.size()), argv.data());
}

TEST(BenchRoofline, ARunComparesAgainstItsOwnDatasheetOrTheOneNamed) {
  // A measured run: the device's own datasheet, and none for a GPU the model does not know
  // (another board of the same chip included: its clocks and bandwidth differ).
  EXPECT_EQ(bench::model_gpu(flags({}), "NVIDIA H200"), &h200());
  EXPECT_EQ(bench::model_gpu(flags({}), "NVIDIA H100 80GB HBM3")->key, "h100");
  EXPECT_EQ(bench::model_gpu(flags({}), "NVIDIA H200 141GB HBM3e"), &h200());
  EXPECT_EQ(bench::model_gpu(flags({}), "NVIDIA H200 NVL"), nullptr);
  EXPECT_EQ(bench::model_gpu(flags({}), "NVIDIA H100 PCIe"), nullptr);
  EXPECT_EQ(bench::model_gpu(flags({}), "NVIDIA H100 NVL"), nullptr);
  EXPECT_EQ(bench::model_gpu(flags({}), "NVIDIA GH200 480GB"), nullptr);
  EXPECT_EQ(bench::model_gpu(flags({}), "kvheap CPU simulator"), nullptr);
  // --model-gpu names one whatever the device; --model-only alone means the H200.
  EXPECT_EQ(bench::model_gpu(flags({"--model-gpu=h100"}), "NVIDIA H200")->key, "h100");
  EXPECT_EQ(bench::model_gpu(flags({"--model-only"}), ""), &h200());
  EXPECT_TRUE(flags({"--model-only"}).only);
  EXPECT_FALSE(flags({"--model-gpu=h200"}).only);
  // An unknown name is an error that lists the known ones.
  EXPECT_EQ(flags({"--model-gpu=b200"}).error,
            "--model-gpu=b200: no datasheet by that name; the model knows h200, h100");
  EXPECT_TRUE(flags({"--model-gpu=h200"}).error.empty());
}

TEST(BenchRoofline, TheNoteSaysModelNotMeasurementAndWhenTheDeviceDiffers) {
  const std::string own = bench::model_note(&h200(), "NVIDIA H200");
  EXPECT_NE(own.find("a prediction, not a measurement"), std::string::npos) << own;
  EXPECT_NE(own.find("4800 GB/s"), std::string::npos) << own;
  EXPECT_EQ(own.find("This device is"), std::string::npos) << own;
  const std::string other = bench::model_note(&h200(), "NVIDIA A100-SXM4-80GB");
  EXPECT_NE(other.find("This device is NVIDIA A100-SXM4-80GB, not that GPU."), std::string::npos)
      << other;
  const std::string none = bench::model_note(nullptr, "NVIDIA L4");
  EXPECT_NE(none.find("No model: no datasheet for NVIDIA L4"), std::string::npos) << none;
  EXPECT_EQ(bench::model_us(nullptr, bench::Work{1e9, 0, 0}), "-");
  EXPECT_EQ(bench::measured_over_model(nullptr, bench::Work{1e9, 0, 0}, 1.0), "-");
}

}  // namespace
}  // namespace kvheap
