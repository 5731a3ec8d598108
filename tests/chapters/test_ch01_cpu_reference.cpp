// Chapter 1's claims: the cached CPU decoder equals full recomputation (the oracle), prompt
// prefill equals token-by-token feeding, RoPE conventions agree, and the reservation policy
// accounts for every byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "chapters/01_cpu_reference/admission.hpp"
#include "chapters/01_cpu_reference/reserved_cache.hpp"
#include "common/forward/backend.hpp"
#include "common/forward/forward_cpu.hpp"
#include "common/model/llama2c_loader.hpp"
#include "common/forward/reference_forward.hpp"
#include "common/model/safetensors_loader.hpp"
#include "common/serving/serve.hpp"
#include "common/model/synthetic_weights.hpp"
#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

using ch01::ReservedCache;

/// Greedy-generates `steps` tokens after `prompt` with the cache, recording every step's logits.
struct Recorded {
  std::vector<int> tokens;                // prompt + generated
  std::vector<std::vector<float>> steps;  // logits that produced each generated token
};

/// One request served by chapter 1's policy through the serving loop: its record.
RequestRecord serve_one(const ModelWeights& w, const Request& request, DType kv,
                        const ServeHooks& hooks = {}) {
  const auto backend = make_backend(w, {.measure_peak = false});
  StaticBatches policy(std::make_unique<ch01::ReservationAdmission<ReservedCache>>(
      std::make_unique<ReservedCache>(w.config, kv), 0));
  return serve(policy, *backend, {request}, w.config, hooks).requests[0];
}

Recorded run_cached(const ModelWeights& w, std::vector<int> prompt, int steps, DType kv) {
  Recorded rec;
  Request request;
  request.prompt = prompt;
  request.max_new_tokens = steps;
  request.sampling.temperature = 0.0f;
  request.ignore_eos = true;
  ServeHooks hooks;
  hooks.on_logits = [&](const StepPlan&, std::span<const float> logits) {
    rec.steps.emplace_back(logits.begin(), logits.end());
  };
  const RequestRecord r = serve_one(w, request, kv, hooks);
  rec.tokens = prompt;
  rec.tokens.insert(rec.tokens.end(), r.generated.begin(), r.generated.end());
  return rec;
}

// Logits of the step that produced token t (t >= prompt length) must equal the oracle's logits
// at position t - 1, recomputed over the whole sequence with no cache.
void expect_matches_oracle(const ModelWeights& w, const std::vector<int>& prompt, int steps) {
  const Recorded rec = run_cached(w, prompt, steps, DType::F32);
  const std::vector<float> ref = reference_logits(w, rec.tokens);
  const int V = w.config.vocab_size;
  ASSERT_EQ(rec.steps.size(), static_cast<std::size_t>(steps));
  for (int s = 0; s < steps; ++s) {
    const std::size_t pos = prompt.size() - 1 + s;
    const std::span<const float> oracle(&ref[pos * V], V);
    const double err = test::rel_inf_error(rec.steps[s], oracle);
    ASSERT_LT(err, 1e-5) << "step " << s << " (position " << pos << ")";
  }
}

TEST(Ch01CpuReference, CachedDecodeEqualsFullRecomputationTiny) {
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 7);
  expect_matches_oracle(w, {1, 5, 9, 33, 2}, 40);
}

TEST(Ch01CpuReference, CachedDecodeEqualsFullRecomputationWithBiasesAndHalvesRope) {
  ModelConfig c = preset("tiny");
  c.attention_bias = true;
  c.rope_style = RopeStyle::Halves;
  c.rope_scaling = {true, 8.0f, 1.0f, 4.0f, 32};
  const ModelWeights w = make_synthetic_weights(c, 11);
  expect_matches_oracle(w, {1, 17, 4}, 30);
}

// Qwen3's per-head q/k norm sits between the projections and RoPE, so its output is what the
// cache stores for k: the cached decoder must normalise each new row exactly as recomputation
// normalises the whole sequence. The model is a synthetic Qwen3 written as a Hugging Face folder
// by the test writer and loaded back, so the loader's path is the one under test.
TEST(Ch01CpuReference, CachedDecodeEqualsFullRecomputationQwen3) {
  const test::TempDir tmp;
  const std::string dir = tmp.file("tiny-qwen3");
  test::write_safetensors(make_synthetic_weights(test::tiny_qwen3_config(), 13), dir);
  const ModelWeights w = load_safetensors(dir);
  ASSERT_TRUE(w.config.qk_norm);
  expect_matches_oracle(w, {1, 17, 4, 99, 23}, 40);
}

// RoPE makes attention a function of relative positions only, so the same tokens placed later in
// the context give the same logits. Qwen3's norm keeps that only because it comes before RoPE:
// its gain differs per dimension, and applied after the rotation it would weigh the rotated pairs
// unequally and make the scores depend on where the text sits.
TEST(Ch01CpuReference, Qwen3LogitsDependOnlyOnRelativePositions) {
  const ModelWeights w = make_synthetic_weights(test::tiny_qwen3_config(), 13);
  const std::vector<int> tokens = {1, 17, 4, 99, 23, 64, 8, 120};
  const std::vector<float> at_start = reference_logits(w, tokens);
  // Angles are fp32 products pos * inv_freq, so a later start rounds them a little differently:
  // about 5e-7 here at offsets from 1 to 88. The norm applied after RoPE gives 0.13 to 0.21.
  const std::vector<float> later = reference_logits(w, tokens, 50);
  EXPECT_LT(test::rel_inf_error(later, at_start), 1e-4);
}

// Weights built by hand for a Qwen3 config but without the norm gains would run as a plain Llama
// block: a silent wrong answer, refused before the first step.
TEST(Ch01CpuReference, Qwen3WeightsWithoutNormGainsAreRejected) {
  ModelWeights w = make_synthetic_weights(test::tiny_qwen3_config(), 13);
  w.layers[1].k_norm = nullptr;
  const std::vector<int> tokens = {1, 2};
  for (const auto& run : {std::function<void()>([&] { CpuForward fwd(w); }),
                          std::function<void()>([&] { (void)reference_logits(w, tokens); })}) {
    try {
      run();
      ADD_FAILURE() << "expected an InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("layer 1 has no q_norm/k_norm gains ([head_dim = 32] "
                                           "each)"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Ch01CpuReference, CachedDecodeEqualsFullRecomputationStories260K) {
  KVHEAP_REQUIRE_MODEL(path, "stories260K.bin");
  const ModelWeights w = load_llama2c(path);
  expect_matches_oracle(w, {1, 400, 260, 430}, 96);
}

RequestRecord generate_stories(const ModelWeights& w, float temperature, std::uint64_t seed) {
  Request request;
  request.prompt = {1};
  request.max_new_tokens = w.config.max_seq_len;  // room to reach the end of a story
  request.sampling.temperature = temperature;
  request.sampling.seed = seed;
  return serve_one(w, request, DType::F32);
}

TEST(Ch01CpuReference, Stories260KGreedyFromBosIsDeterministic) {
  KVHEAP_REQUIRE_MODEL(path, "stories260K.bin");
  const ModelWeights w = load_llama2c(path);
  const RequestRecord a = generate_stories(w, 0.0f, 1);
  const RequestRecord b = generate_stories(w, 0.0f, 2);  // the seed must not matter greedily
  EXPECT_EQ(a.generated, b.generated);
  EXPECT_GT(a.generated.size(), 10u);
  EXPECT_EQ(std::count(a.generated.begin(), a.generated.end(), 1), 0)
      << "the stop token (BOS) must never be emitted";
}

// Greedy decoding of stories260K from BOS runs to the end of the context without producing BOS
// (an independent NumPy implementation agrees token for token), so the stop is checked on
// sampled stories: the model ends a story by emitting BOS, which stops generation and is not
// part of the output.
TEST(Ch01CpuReference, Stories260KSampledStoriesStopAtBos) {
  KVHEAP_REQUIRE_MODEL(path, "stories260K.bin");
  const ModelWeights w = load_llama2c(path);
  int stopped = 0;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    const RequestRecord r = generate_stories(w, 1.0f, seed);
    EXPECT_EQ(std::count(r.generated.begin(), r.generated.end(), 1), 0) << "seed " << seed;
    if (r.status == "stop token") {
      ++stopped;
      EXPECT_LT(r.generated.size(), static_cast<std::size_t>(w.config.max_seq_len));
    }
    EXPECT_EQ(r.generated, generate_stories(w, 1.0f, seed).generated) << "seed " << seed;
  }
  EXPECT_GE(stopped, 4) << "most sampled stories should end with BOS well within the context";
}

TEST(Ch01CpuReference, PrefillAsOneBatchEqualsTokenByToken) {
  auto check = [](const ModelWeights& w, const std::vector<int>& prompt) {
    CpuForward fwd(w);
    ReservedCache batched(w.config, DType::F32), stepped(w.config, DType::F32);
    const int s1 = batched.admit(), s2 = stepped.admit();
    Batch b;
    for (std::size_t i = 0; i < prompt.size(); ++i)
      b.rows.push_back({prompt[i], s1, static_cast<int>(i), true});
    const auto all = fwd.forward(b, batched);
    const std::vector<float> one_pass(all.begin(), all.end());
    const int V = w.config.vocab_size;
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      Batch one;
      one.rows.push_back({prompt[i], s2, static_cast<int>(i), true});
      const auto logits = fwd.forward(one, stepped);
      EXPECT_LT(test::rel_inf_error(logits, std::span<const float>(&one_pass[i * V], V)), 1e-5)
          << "position " << i;
    }
  };
  check(make_synthetic_weights(preset("tiny"), 3), {1, 8, 99, 100, 3, 3, 7});
  if (auto p = test::model_file("stories260K.bin"))
    check(load_llama2c(*p), {1, 400, 260, 430, 301, 29, 280, 500});
  else if (test::running_in_ci())
    FAIL() << "KVHEAP_MODELS_DIR must hold stories260K.bin in CI";
}

// Hugging Face checkpoints permute the rows of wq and wk so that RoPE rotates halves instead of
// interleaved pairs. Applying that permutation and switching the convention must not change the
// model.
TEST(Ch01CpuReference, RopeConventionConversionPreservesLogits) {
  ModelConfig c = preset("tiny");
  c.attention_bias = true;
  const ModelWeights a = make_synthetic_weights(c, 5);
  ModelWeights b = make_synthetic_weights(c, 5);
  b.config.rope_style = RopeStyle::Halves;
  const int hd = c.head_dim;
  auto permute = [&](const float* src, float* dst, int heads, int cols) {
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hd / 2; ++i)
        for (int col = 0; col < cols; ++col) {
          dst[(static_cast<long>(h) * hd + i) * cols + col] =
              src[(static_cast<long>(h) * hd + 2 * i) * cols + col];
          dst[(static_cast<long>(h) * hd + hd / 2 + i) * cols + col] =
              src[(static_cast<long>(h) * hd + 2 * i + 1) * cols + col];
        }
  };
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = b.layers[l];
    float* wq = b.allocate(static_cast<std::size_t>(c.q_dim()) * c.dim);
    float* wk = b.allocate(static_cast<std::size_t>(c.kv_dim()) * c.dim);
    float* bq = b.allocate(c.q_dim());
    float* bk = b.allocate(c.kv_dim());
    permute(a.layers[l].wq, wq, c.n_heads, c.dim);
    permute(a.layers[l].wk, wk, c.n_kv_heads, c.dim);
    permute(a.layers[l].bq, bq, c.n_heads, 1);
    permute(a.layers[l].bk, bk, c.n_kv_heads, 1);
    L.wq = wq, L.wk = wk, L.bq = bq, L.bk = bk;
  }
  const std::vector<int> tokens = {1, 4, 90, 21, 21, 77, 3, 64, 12, 8};
  const auto la = reference_logits(a, tokens);
  const auto lb = reference_logits(b, tokens);
  EXPECT_LT(test::rel_inf_error(la, lb), 1e-5);
  // And a convention mismatch would be caught: the unpermuted weights with the wrong rotation
  // give different logits.
  ModelWeights wrong = make_synthetic_weights(c, 5);
  wrong.config.rope_style = RopeStyle::Halves;
  EXPECT_GT(test::rel_inf_error(reference_logits(wrong, tokens), la), 1e-3);
}

TEST(Ch01CpuReference, HalfPrecisionKvStaysCloseToFp32) {
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 9);
  const std::vector<int> prompt = {1, 50, 60};
  const Recorded f32 = run_cached(w, prompt, 20, DType::F32);
  for (DType kv : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(std::string(dtype_name(kv)));
    const Recorded half = run_cached(w, prompt, 20, kv);
    // Only the first step is compared exactly on the same tokens: later steps may pick other
    // tokens. bf16 keeps 8 mantissa bits (relative error 2^-9), fp16 keeps 11.
    EXPECT_LT(test::rel_inf_error(half.steps[0], f32.steps[0]), kv == DType::BF16 ? 5e-2 : 5e-3);
    EXPECT_GT(test::rel_inf_error(half.steps[0], f32.steps[0]), 0.0) << "KV was not rounded";
  }
}

/// Logits of `tokens` fed as one prompt, then of one decode step after it, through CpuForward
/// with weights packed as `wt` (bf16 multiplied as `bf16` says).
std::vector<std::vector<float>> prompt_then_step(
    const ModelWeights& w, DType wt, const std::vector<int>& tokens,
    cpu::Bf16Products bf16 = cpu::Bf16Products::kWiden) {
  ReservedCache cache(w.config, DType::F32);
  const int slot = cache.admit();
  CpuForward fwd(w, wt, bf16);
  Batch prompt;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    prompt.rows.push_back({tokens[i], slot, static_cast<int>(i), true});
  std::vector<std::vector<float>> out;
  const auto a = fwd.forward(prompt, cache);
  out.emplace_back(a.begin(), a.end());
  Batch step;
  step.rows.push_back({7, slot, static_cast<int>(tokens.size()), true});
  const auto b = fwd.forward(step, cache);
  out.emplace_back(b.begin(), b.end());
  return out;
}

// bf16 and fp16 weights widened exactly in registers: the pass gives bitwise the logits of fp32
// weights rounded to that type on the host (the embedding table, read one row at a time, stays
// fp32 in both), and within the type's rounding of the unrounded weights' logits. bf16 pairs
// (AVX512-BF16) round the activations too: tier 2, within the same bound of both.
TEST(Ch01CpuReference, HalfWeightsEqualWeightsRoundedOnTheHost) {
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 9);
  const ModelConfig& c = w.config;
  const std::vector<int> tokens = {1, 50, 60, 61};
  const auto f32 = prompt_then_step(w, DType::F32, tokens);
  for (const DType wt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(std::string(dtype_name(wt)));
    ModelWeights r = w;  // shares w's buffers; the matrices below are rounded copies
    const auto round = [&](const float* m, std::size_t n) {
      float* copy = r.allocate(n);
      for (std::size_t i = 0; i < n; ++i) copy[i] = test::stored_as(m[i], wt);
      return copy;
    };
    const auto d = static_cast<std::size_t>(c.dim), h = static_cast<std::size_t>(c.hidden_dim);
    for (LayerWeights& L : r.layers) {
      L.wq = round(L.wq, c.q_dim() * d);
      L.wk = round(L.wk, c.kv_dim() * d);
      L.wv = round(L.wv, c.kv_dim() * d);
      L.wo = round(L.wo, d * c.q_dim());
      L.w1 = round(L.w1, h * d);
      L.w2 = round(L.w2, d * h);
      L.w3 = round(L.w3, h * d);
    }
    r.classifier = round(r.classifier, static_cast<std::size_t>(c.vocab_size) * d);
    const auto narrow = prompt_then_step(w, wt, tokens);
    const auto host = prompt_then_step(r, DType::F32, tokens);
    // bf16 keeps 8 mantissa bits (relative error 2^-9 per weight), fp16 11.
    const double bound = wt == DType::BF16 ? 5e-2 : 5e-3;
    for (std::size_t s = 0; s < narrow.size(); ++s) {
      EXPECT_EQ(narrow[s], host[s]) << "pass " << s;
      const double err = test::rel_inf_error(narrow[s], f32[s]);
      EXPECT_LT(err, bound) << "pass " << s;
      EXPECT_GT(err, 0.0) << "pass " << s << ": the weights were not rounded";
    }
    if (wt != DType::BF16 || !cpu::bf16_pairs_built()) continue;
    const auto pairs = prompt_then_step(w, wt, tokens, cpu::Bf16Products::kPairs);
    for (std::size_t s = 0; s < pairs.size(); ++s) {
      EXPECT_LT(test::rel_inf_error(pairs[s], host[s]), bound) << "pairs, pass " << s;
      EXPECT_GT(test::rel_inf_error(pairs[s], host[s]), 0.0)
          << "pairs, pass " << s << ": the activations were not rounded";
      EXPECT_LT(test::rel_inf_error(pairs[s], f32[s]), bound) << "pairs, pass " << s;
    }
  }
}

// The packed weights are a second copy: one the host cannot hold is refused by name before a
// page is touched (the matrices here exist only in the config; nothing is read).
TEST(Ch01CpuReference, PackedWeightsLargerThanTheHostAreRefusedByName) {
  ModelWeights w;
  w.config = preset("tiny");
  w.config.vocab_size = 1 << 30;  // a [2^30, 4096] fp32 classifier: 16 TiB
  w.config.dim = 1 << 12;
  test::expect_error_mentioning<ResourceError>(
      [&] { const CpuForward fwd(w, DType::F32); },
      {"packing tiny's weight matrices", "more than this host's available memory",
       "--weight-dtype bf16 halves it"});
}

TEST(Ch01CpuReference, ReservationAccountsForEveryByte) {
  const ModelConfig c = preset("tiny");
  const std::size_t per_seq = kv_bytes_for_context(c, DType::F32, c.max_seq_len);
  ReservedCache cache(c, DType::F32, 2 * per_seq);
  EXPECT_EQ(cache.reservation_bytes(), per_seq);
  const int a = cache.admit();
  const int b = cache.admit();
  EXPECT_FALSE(cache.can_admit());
  try {
    (void)cache.admit();
    FAIL() << "a third reservation must not fit a two-sequence budget";
  } catch (const ResourceError& e) {
    EXPECT_NE(std::string(e.what()).find("budget exhausted"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.bytes_reserved(), 2 * per_seq);
  EXPECT_EQ(cache.bytes_used(), 0u);
  const ModelWeights w = make_synthetic_weights(c, 1);
  CpuForward fwd(w);
  Batch batch;
  for (int i = 0; i < 5; ++i) batch.rows.push_back({3, a, i, i == 4});
  (void)fwd.forward(batch, cache);
  EXPECT_EQ(cache.length(a), 5);
  EXPECT_EQ(cache.bytes_used(), kv_bytes_for_context(c, DType::F32, 5));
  cache.release(b);
  EXPECT_TRUE(cache.can_admit());
  cache.release(a);
  EXPECT_EQ(cache.bytes_reserved(), 0u);
  EXPECT_THROW(cache.release(a), InputError);
}

TEST(Ch01CpuReference, BudgetSmallerThanOneSequenceIsRejectedAtStart) {
  const ModelConfig c = preset("tiny");
  try {
    ReservedCache cache(c, DType::F32, 1000);
    FAIL();
  } catch (const ResourceError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot hold even one sequence"), std::string::npos);
  }
}

TEST(Ch01CpuReference, BadTokensAndPositionsAreRejected) {
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 1);
  ReservedCache cache(w.config, DType::F32);
  const int slot = cache.admit();
  CpuForward fwd(w);
  Batch b;
  b.rows.push_back({w.config.vocab_size, slot, 0, true});
  EXPECT_THROW((void)fwd.forward(b, cache), InputError);
  b.rows[0] = {1, slot, w.config.max_seq_len, true};
  EXPECT_THROW((void)fwd.forward(b, cache), InputError);
  EXPECT_THROW(check_generation_fits(0, 10, w.config), InputError);
  EXPECT_THROW(check_generation_fits(w.config.max_seq_len + 1, 1, w.config), InputError);
  EXPECT_THROW(check_generation_fits(10, w.config.max_seq_len, w.config), UsageError);
  EXPECT_NO_THROW(check_generation_fits(10, w.config.max_seq_len - 9, w.config));
}

// The cache holds positions 0..length-1 and nothing else: a row that skips ahead would attend to
// positions never written, and a repeated position is two writes of one row. Both are refused
// before anything is written.
TEST(Ch01CpuReference, RowsMustWriteEachSlotsPositionsInOrder) {
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 1);
  ReservedCache cache(w.config, DType::F32);
  const int slot = cache.admit();
  CpuForward fwd(w);
  for (const std::vector<int>& positions : std::vector<std::vector<int>>{{1}, {0, 0}, {0, 2}}) {
    Batch b;
    for (int p : positions) b.rows.push_back({1, slot, p, true});
    EXPECT_THROW((void)fwd.forward(b, cache), InputError) << positions.size();
    EXPECT_EQ(cache.length(slot), 0);
  }
  Batch ok;
  for (int p = 0; p < 3; ++p) ok.rows.push_back({1, slot, p, p == 2});
  (void)fwd.forward(ok, cache);
  EXPECT_EQ(cache.length(slot), 3);
  ok.rows = {{1, slot, 2, true}, {1, slot, 3, true}};  // rewrite the last, append one
  (void)fwd.forward(ok, cache);
  EXPECT_EQ(cache.length(slot), 4);
}

}  // namespace
}  // namespace kvheap
