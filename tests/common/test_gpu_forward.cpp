// GpuForward against CpuForward on the `tiny` preset, with the attention kernel taken out of the
// picture: the device cache here keeps K and V in device memory but attends by downloading them
// and calling the CPU twin (cpu::attend_kv_heads). A mismatch therefore points at the forward pass
// (embedding, norms, GEMMs, biases, Qwen3's q/k norms, RoPE, SwiGLU, residuals, classifier, row
// bookkeeping).
#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <vector>

#include "base/error.hpp"
#include "chapters/01_cpu_reference/reserved_cache.hpp"
#include "common/forward/forward_cpu.hpp"
#include "common/forward/cuda/forward_gpu.hpp"
#include "common/cache/kv_cache.hpp"
#include "common/model/safetensors_loader.hpp"
#include "common/serving/sampler.hpp"
#include "common/model/synthetic_weights.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/device_test_support.hpp"

namespace kvheap {
namespace {

using test::rel_close;

/// Stores K/V rows in device memory, [slots, n_layers, max_seq_len, kv_dim] each, and attends on
/// the host with the CPU twin.
class HostAttentionCache final : public KVCache {
 public:
  HostAttentionCache(const ModelConfig& c, int slots)
      : c_(c), k_(elements(c, slots)), v_(elements(c, slots)) {}

  void prepare(const Batch& batch) override { batch_ = batch; }

  void write(int layer, const Batch&, const float* k, const float* v) override {
    const std::size_t row_bytes = sizeof(float) * c_.kv_dim();
    for (int i = 0; i < batch_.size(); ++i) {
      const BatchRow& r = batch_.rows[i];
      const long src = static_cast<long>(i) * c_.kv_dim();
      KVHEAP_CUDA_CHECK(cudaMemcpy(k_.data() + offset(layer, r.seq, r.pos), k + src, row_bytes,
                                   cudaMemcpyDeviceToDevice));
      KVHEAP_CUDA_CHECK(cudaMemcpy(v_.data() + offset(layer, r.seq, r.pos), v + src, row_bytes,
                                   cudaMemcpyDeviceToDevice));
    }
  }

  void attend(int layer, const Batch&, const float* q, float* out) override {
    const int n = batch_.size();
    const int hd = c_.head_dim, group = c_.group_size();
    std::vector<float> hq(static_cast<std::size_t>(n) * c_.q_dim());
    std::vector<float> hout(hq.size());
    KVHEAP_CUDA_CHECK(cudaMemcpy(hq.data(), q, hq.size() * sizeof(float), cudaMemcpyDeviceToHost));
    const std::vector<float> kc = k_.to_host(), vc = v_.to_host();
    std::vector<float> scores;
    for (int i = 0; i < n; ++i) {
      const BatchRow& r = batch_.rows[i];
      const long base = offset(layer, r.seq, 0);
      const cpu::ContiguousRows<float> rows{kc.data() + base, vc.data() + base, c_.kv_dim()};
      scores.resize(cpu::attend_scratch_floats(c_.n_heads, hd));
      const long qo = static_cast<long>(i) * c_.q_dim();
      cpu::attend_kv_heads<float>(hq.data() + qo, rows, r.pos + 1, {c_.n_kv_heads, group, hd}, 0,
                                  c_.n_kv_heads, hout.data() + qo, scores.data());
    }
    KVHEAP_CUDA_CHECK(
        cudaMemcpy(out, hout.data(), hout.size() * sizeof(float), cudaMemcpyHostToDevice));
  }

  [[nodiscard]] std::size_t bytes_reserved() const override { return k_.bytes() + v_.bytes(); }
  [[nodiscard]] std::size_t bytes_used() const override { return 0; }  // not tracked here
  [[nodiscard]] long positions_read() const override { return 0; }     // not tracked here

 private:
  static std::size_t elements(const ModelConfig& c, int slots) {
    return static_cast<std::size_t>(slots) * c.n_layers * c.max_seq_len * c.kv_dim();
  }
  [[nodiscard]] long offset(int layer, int slot, int pos) const {
    return ((static_cast<long>(slot) * c_.n_layers + layer) * c_.max_seq_len + pos) * c_.kv_dim();
  }

  ModelConfig c_;
  DeviceBuffer<float> k_;  // [slots, n_layers, max_seq_len, kv_dim]
  DeviceBuffer<float> v_;  // [slots, n_layers, max_seq_len, kv_dim]
  Batch batch_;
};

/// Two sequences in one batch, like chapter 5 will run them: first both prompts (with a middle row
/// of the first one also asking for logits, and rows interleaved by sequence), then `steps`
/// decode rows per sequence, each fed the CPU's greedy token. Checks every logit row against
/// CpuForward within `tol` of the row's largest logit; with `greedy`, odd steps use
/// greedy jobs and check their ids and top-2 gaps against the CPU's instead.
void expect_matches_cpu(const ModelWeights& w, DType weights, double tol, int steps,
                        bool greedy = false) {
  const ModelConfig& c = w.config;
  ch01::ReservedCache cpu_cache(c, DType::F32);
  const int slot_a = cpu_cache.admit(), slot_b = cpu_cache.admit();
  HostAttentionCache gpu_cache(c, 2);
  CpuForward cpu(w);
  GpuForward gpu(w, weights);

  const std::vector<int> prompt_a = {1, 5, 9, 33, 2}, prompt_b = {1, 70, 3};
  std::vector<int> len = {0, 0};  // tokens per sequence so far
  Batch b;
  for (int i = 0; i < 5; ++i) {
    b.rows.push_back({prompt_a[i], slot_a, len[0]++, i == 4 || i == 2});
    if (i < 3) b.rows.push_back({prompt_b[i], slot_b, len[1]++, i == 2});
  }
  for (int s = 0; s <= steps; ++s) {
    const std::span<const float> want = cpu.forward(b, cpu_cache);
    const int m = b.num_logit_rows();
    ASSERT_EQ(want.size(), static_cast<std::size_t>(m) * c.vocab_size);
    std::vector<int> next(m);
    for (int j = 0; j < m; ++j) next[j] = argmax(want.subspan(j * c.vocab_size, c.vocab_size));
    if (greedy && s % 2 == 1) {
      std::vector<SamplingJob> jobs;
      for (int j = 0; j < m; ++j) jobs.push_back({j, 0.0f, 1.0f, 0.0f});
      const std::span<const SampledToken> picks = gpu.forward(b, gpu_cache, jobs);
      ASSERT_EQ(picks.size(), jobs.size());
      for (int j = 0; j < m; ++j) {
        EXPECT_EQ(picks[j].token, next[j]) << "step " << s << ", logit row " << j;
        // The device's top-2 gap is the host's, within the logits' own tolerance.
        EXPECT_NEAR(top2_gap(picks[j]), top2_gap(want.subspan(j * c.vocab_size, c.vocab_size)),
                    4 * tol)
            << "step " << s << ", logit row " << j;
      }
    } else {
      const std::span<const float> got = gpu.forward(b, gpu_cache);
      ASSERT_EQ(got.size(), want.size());
      for (int j = 0; j < m; ++j) {
        const std::size_t at = static_cast<std::size_t>(j) * c.vocab_size;
        EXPECT_TRUE(rel_close(got.subspan(at, c.vocab_size), want.subspan(at, c.vocab_size), tol))
            << "step " << s << ", logit row " << j;
      }
    }
    // The next batch: one decode row per sequence, fed the CPU's greedy token from that
    // sequence's last logit row. The prompt batch's logit rows are A2, B2, A4, in row order.
    const int tok_a = s == 0 ? next[2] : next[0];
    const int tok_b = next[1];
    b.rows = {{tok_a, slot_a, len[0]++, true}, {tok_b, slot_b, len[1]++, true}};
  }
}

TEST(GpuForward, LogitsMatchCpuForwardFp32) {
  KVHEAP_REQUIRE_DEVICE();
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 7);
  expect_matches_cpu(w, DType::F32, 1e-5, 12);
}

TEST(GpuForward, LogitsMatchCpuForwardWithBiasesHalvesRopeAndLlama3Scaling) {
  KVHEAP_REQUIRE_DEVICE();
  ModelConfig c = preset("tiny");
  c.attention_bias = true;
  c.rope_style = RopeStyle::Halves;
  c.rope_scaling = {true, 8.0f, 1.0f, 4.0f, 32};
  c.tied_embeddings = false;
  const ModelWeights w = make_synthetic_weights(c, 11);
  expect_matches_cpu(w, DType::F32, 1e-5, 12);
}

// A synthetic Qwen3 written as a Hugging Face folder and loaded back: the q/k norm kernel runs
// between the projections and RoPE, heads are twice as wide as dim / n_heads, and every other
// step's ids come from the device's argmax.
TEST(GpuForward, Qwen3CheckpointGivesTheCpusLogitsAndGreedyIds) {
  KVHEAP_REQUIRE_DEVICE();
  const test::TempDir tmp;
  const std::string dir = tmp.file("tiny-qwen3");
  test::write_safetensors(make_synthetic_weights(test::tiny_qwen3_config(), 13), dir);
  const ModelWeights w = load_safetensors(dir);
  ASSERT_TRUE(w.config.qk_norm);
  expect_matches_cpu(w, DType::F32, 1e-5, 12, /*greedy=*/true);
}

TEST(GpuForward, GreedyIdsMatchCpuArgmax) {
  KVHEAP_REQUIRE_DEVICE();
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 5);
  expect_matches_cpu(w, DType::F32, 1e-5, 10, /*greedy=*/true);
}

// Half-precision weights: every matrix is rounded once (bf16 keeps 8 significant bits, relative
// error up to 2^-9; fp16 keeps 11, 2^-12) and so is every GEMM input, while CpuForward stays fp32.
// Over the tiny model's two layers this adds up to 1.3e-2 of the largest logit for bf16 and
// 1.5e-3 for fp16 (measured in the simulator); the tolerances allow between 2 and 3 times that.
// The fp32 run above, for comparison, measures 1.1e-6 against its 1e-5.
TEST(GpuForward, LogitsTrackCpuForwardWithBf16Weights) {
  KVHEAP_REQUIRE_DEVICE();
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 7);
  expect_matches_cpu(w, DType::BF16, 3e-2, 6);
}

TEST(GpuForward, LogitsTrackCpuForwardWithFp16Weights) {
  KVHEAP_REQUIRE_DEVICE();
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 7);
  expect_matches_cpu(w, DType::F16, 4e-3, 6);
}

TEST(GpuForward, RejectsRowsOutsideTheModelAndAcceptsEmptyBatches) {
  KVHEAP_REQUIRE_DEVICE();
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 7);
  HostAttentionCache cache(w.config, 1);
  GpuForward gpu(w, DType::F32);
  EXPECT_TRUE(gpu.forward(Batch{}, cache).empty());
  EXPECT_TRUE(gpu.forward(Batch{}, cache, {}).empty());
  Batch bad_token{{{w.config.vocab_size, 0, 0, true}}};
  EXPECT_THROW((void)gpu.forward(bad_token, cache), InputError);
  Batch bad_pos{{{1, 0, w.config.max_seq_len, true}}};
  const std::vector<SamplingJob> one = {{0, 0.0f, 1.0f, 0.0f}};
  EXPECT_THROW((void)gpu.forward(bad_pos, cache, one), InputError);
  // A job must read one of the batch's logit rows.
  Batch two{{{1, 0, 0, true}}};
  const std::vector<SamplingJob> past = {{1, 0.0f, 1.0f, 0.0f}};
  EXPECT_THROW((void)gpu.forward(two, cache, past), InputError);
  // A batch with no logit rows still runs (and fills the cache) but returns nothing.
  Batch silent{{{1, 0, 0, false}}};
  EXPECT_TRUE(gpu.forward(silent, cache).empty());
}

TEST(DeviceWeights, UploadsEveryTensorOnceInTheChosenDtype) {
  KVHEAP_REQUIRE_DEVICE();
  for (bool tied : {true, false}) {
    ModelConfig c = preset("tiny");
    c.tied_embeddings = tied;
    c.attention_bias = !tied;
    c.qk_norm = tied;
    const ModelWeights w = make_synthetic_weights(c, 3);
    const auto dim = static_cast<std::size_t>(c.dim);
    // wq and wo, wk and wv, w1 w2 and w3
    const std::size_t per_layer_matrices =
        2 * c.q_dim() * dim + 2 * c.kv_dim() * dim + 3 * c.hidden_dim * dim;
    const std::size_t matrices =
        c.n_layers * per_layer_matrices + (tied ? 1 : 2) * c.vocab_size * dim;  // + embedding
    const std::size_t vectors = (1 + 2 * c.n_layers) * dim +                    // norms
                                (tied ? 0 : c.n_layers * (c.q_dim() + 2 * c.kv_dim())) +  // biases
                                (tied ? c.n_layers * 2 * c.head_dim : 0);  // q/k norm gains
    for (DType dtype : {DType::F32, DType::BF16}) {
      const DeviceWeights dw(w, dtype);
      EXPECT_EQ(dw.bytes_uploaded(), matrices * dtype_size(dtype) + vectors * sizeof(float))
          << (tied ? "tied " : "untied ") << dtype_name(dtype);
      EXPECT_EQ(dw.tied(), tied);
      EXPECT_EQ(dw.classifier().dtype, dtype);
      EXPECT_EQ(dw.layer(1).bq.empty(), tied);
      EXPECT_EQ(dw.layer(1).k_norm.size(), tied ? static_cast<std::size_t>(c.head_dim) : 0u);
    }
  }
}

}  // namespace
}  // namespace kvheap
