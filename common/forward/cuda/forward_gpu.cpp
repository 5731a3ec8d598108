// The GPU forward pass, top to bottom: embed, then per layer attention and MLP, then classifier.
// Read it beside common/forward/forward_cpu.cpp: the steps and their order are the same, each CPU
// call replaced by its CUDA twin (kernels/*.hpp) or a device GEMM.
#include "common/forward/cuda/forward_gpu.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "base/error.hpp"
#include "common/forward/forward_cpu.hpp"
#include "common/model/rope_freqs.hpp"
#include "kernels/cast.hpp"
#include "kernels/embedding.hpp"
#include "kernels/qk_norm.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/sample.hpp"
#include "kernels/swiglu.hpp"

namespace kvheap {
namespace {

// Every launch, copy and GEMM goes to the default stream (see the class comment).
constexpr cudaStream_t kStream = nullptr;

using Clock = std::chrono::steady_clock;

}  // namespace

GpuForward::GpuForward(const ModelWeights& weights, DType weight_dtype)
    : w_(weights, weight_dtype) {
  const std::vector<float> inv_freq = rope_inv_freq(config());
  inv_freq_ = DeviceBuffer<float>::from_host(inv_freq, kStream);
}

std::size_t GpuForward::scratch_bytes() const noexcept {
  std::size_t bytes = 0;
  a_.each([&](const DeviceBuffer<float>& b) { bytes += b.bytes(); });
  return bytes + last_.bytes() + logits_.bytes() + narrow_.bytes() + probs_.bytes() +
         picks_.bytes();
}

void GpuForward::reserve(int n, int m, int jobs, int draws) {
  const ModelConfig& c = config();
  const auto rows = static_cast<std::size_t>(n);
  const auto logit_rows = static_cast<std::size_t>(m);
  a_.size_for(c, rows, [](DeviceBuffer<float>& b, std::size_t floats) { b.grow(floats); });
  last_.grow(logit_rows * c.dim);
  logits_.grow(logit_rows * c.vocab_size);
  if (w_.matrix_dtype() != DType::F32) {
    const int widest = std::max({c.dim, c.q_dim(), c.hidden_dim});
    narrow_.grow(rows * widest * dtype_size(w_.matrix_dtype()));
  }
  picks_.grow(static_cast<std::size_t>(jobs));
  host_picks_.grow(static_cast<std::size_t>(jobs));
  probs_.grow(static_cast<std::size_t>(cuda::sample_scratch_floats(draws, c.vocab_size)));
}

const void* GpuForward::gemm_input(const float* x, long count) {
  // cuBLAS multiplies operands of one dtype, so half-precision weights need half-precision
  // activations; the product is still accumulated in fp32.
  if (w_.matrix_dtype() == DType::F32) return x;
  cuda::cast_from_f32(narrow_.data(), w_.matrix_dtype(), x, count, kStream);
  return narrow_.data();
}

void GpuForward::project(const void* a, const DeviceMatrix& w, float* y, int rows) {
  gemm(blas_, w.dtype, a, w.data(), y, GemmShape{rows, w.rows, w.cols}, kStream);
}

void GpuForward::prepare(const Batch& batch, KVCache& cache) {
  const Clock::time_point t0 = Clock::now();
  prepared_ = false;  // a prepare() that throws leaves nothing prepared
  validate_batch(batch, config());
  stage_view(batch, cache);
  prepare_seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
  prepared_ = true;
}

void GpuForward::stage_view(const Batch& batch, KVCache& cache) {
  staged_.clear();  // the last pass waited for its tokens, so no copy still reads it
  if (batch.size() > 0) {
    const StagedUpload::Scope scope(staged_);  // the cache's view joins the pass's upload
    cache.prepare(batch);
  }
}

void GpuForward::run(const Batch& batch, KVCache& cache, std::span<const SamplingJob> jobs) {
  const Clock::time_point t0 = Clock::now();
  const bool ahead = prepared_;  // else the cache is prepared below, inside the time measured here
  prepared_ = false;             // the next pass prepares again
  const ModelConfig& c = config();
  // Checked again after a prepare(): a pass given another batch than the one prepared must be
  // refused here, not read out of bounds on the device.
  validate_batch(batch, c);
  const int n = batch.size();
  const int m = batch.num_logit_rows();
  times_ = PassTimes{};
  logits_fresh_ = false;
  logit_rows_count_ = m;
  host_draws_.clear();
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    if (jobs[j].row < 0 || jobs[j].row >= m)
      throw InputError(fmt::format("sampling job {} reads logit row {}, but the batch has {}", j,
                                   jobs[j].row, m));
    if (jobs[j].inv_temperature > 0.0f) host_draws_.push_back(static_cast<int>(j));
  }
  if (n == 0) return;
  const auto n_jobs = static_cast<int>(jobs.size());
  const auto n_draws = static_cast<int>(host_draws_.size());
  reserve(n, m, n_jobs, n_draws);
  const bool interleaved = c.rope_style == RopeStyle::Interleaved;
  const long n_dim = static_cast<long>(n) * c.dim;

  // The pass's one upload: the cache's view (prepare() staged it), then the token ids,
  // positions, logit rows and sampling jobs. add() copies, so host_ints_ is reused.
  if (!ahead) stage_view(batch, cache);
  host_ints_.clear();
  for (const BatchRow& row : batch.rows) host_ints_.push_back(row.token);
  const std::size_t tokens_at = staged_.add<int>(host_ints_);
  host_ints_.clear();
  for (const BatchRow& row : batch.rows) host_ints_.push_back(row.pos);
  const std::size_t pos_at = staged_.add<int>(host_ints_);
  host_ints_.clear();
  for (int r = 0; r < n; ++r)
    if (batch.rows[r].wants_logits) host_ints_.push_back(r);
  const std::size_t rows_at = staged_.add<int>(host_ints_);
  const std::size_t jobs_at = staged_.add<SamplingJob>(jobs);
  const std::size_t draws_at = staged_.add<int>(host_draws_);
  staged_.upload(kStream);
  tokens_ = staged_.device<int>(tokens_at);
  pos_ = staged_.device<int>(pos_at);
  logit_rows_ = staged_.device<int>(rows_at);
  jobs_ = staged_.device<SamplingJob>(jobs_at);
  draws_ = staged_.device<int>(draws_at);
  times_.prepare =
      (ahead ? prepare_seconds_ : 0.0) + std::chrono::duration<double>(Clock::now() - t0).count();

  started_.record(kStream);
  cuda::embedding(a_.x.data(), tokens_, w_.token_embedding().data(), w_.matrix_dtype(), n, c.dim,
                  c.vocab_size, kStream);

  for (int l = 0; l < c.n_layers; ++l) {
    const DeviceLayerWeights& L = w_.layer(l);
    // Attention block: x += Wo * attend(rope(Wq xn), cache <- (rope(Wk xn), Wv xn)), with Qwen3's
    // per-head norm of q and k between the projection and RoPE.
    cuda::rmsnorm(a_.xn.data(), a_.x.data(), L.attn_norm.data(), n, c.dim, c.norm_eps, kStream);
    const void* xn = gemm_input(a_.xn.data(), n_dim);
    project(xn, L.wq, a_.q.data(), n);
    project(xn, L.wk, a_.k.data(), n);
    project(xn, L.wv, a_.v.data(), n);
    cuda::add_bias(a_.q.data(), L.bq.data(), n, c.q_dim(), kStream);  // no-ops without biases
    cuda::add_bias(a_.k.data(), L.bk.data(), n, c.kv_dim(), kStream);
    cuda::add_bias(a_.v.data(), L.bv.data(), n, c.kv_dim(), kStream);
    if (c.qk_norm)
      cuda::qk_norm(a_.q.data(), a_.k.data(), L.q_norm.data(), L.k_norm.data(), n, c.n_heads,
                    c.n_kv_heads, c.head_dim, c.norm_eps, kStream);
    cuda::rope(a_.q.data(), pos_, n, c.n_heads, c.head_dim, inv_freq_.data(), interleaved, kStream);
    cuda::rope(a_.k.data(), pos_, n, c.n_kv_heads, c.head_dim, inv_freq_.data(), interleaved,
               kStream);
    cache.write(l, batch, a_.k.data(), a_.v.data());
    cache.attend(l, batch, a_.q.data(), a_.att.data());
    project(gemm_input(a_.att.data(), static_cast<long>(n) * c.q_dim()), L.wo, a_.proj.data(), n);
    cuda::residual_add(a_.x.data(), a_.proj.data(), n_dim, kStream);

    // MLP block: x += W2 (silu(W1 xn) * W3 xn).
    cuda::rmsnorm(a_.xn.data(), a_.x.data(), L.ffn_norm.data(), n, c.dim, c.norm_eps, kStream);
    const void* xn2 = gemm_input(a_.xn.data(), n_dim);
    project(xn2, L.w1, a_.gate.data(), n);
    project(xn2, L.w3, a_.up.data(), n);
    const long n_hidden = static_cast<long>(n) * c.hidden_dim;
    cuda::swiglu(a_.gate.data(), a_.up.data(), n_hidden, kStream);
    project(gemm_input(a_.gate.data(), n_hidden), L.w2, a_.proj.data(), n);
    cuda::residual_add(a_.x.data(), a_.proj.data(), n_dim, kStream);
  }

  // Classifier only for rows that want logits: in a prompt that is just the last row, which saves
  // the largest matrix product of a prefill.
  if (m > 0) {
    cuda::gather_rows(last_.data(), logit_rows_, a_.x.data(), m, c.dim, n, kStream);
    cuda::rmsnorm(last_.data(), last_.data(), w_.final_norm().data(), m, c.dim, c.norm_eps,
                  kStream);
    project(gemm_input(last_.data(), static_cast<long>(m) * c.dim), w_.classifier(), logits_.data(),
            m);
  }
  forwarded_.record(kStream);

  // The tokens: chosen where the logits are, and 16 bytes a job brought back.
  if (n_jobs > 0) {
    cuda::sample_rows(picks_.data(), logits_.data(), c.vocab_size, jobs_, n_jobs,
                      n_draws > 0 ? draws_ : nullptr, n_draws,
                      n_draws > 0 ? probs_.data() : nullptr, kStream);
    KVHEAP_CUDA_CHECK(cudaMemcpyAsync(host_picks_.data(), picks_.data(),
                                      sizeof(SampledToken) * n_jobs, cudaMemcpyDeviceToHost,
                                      kStream));
  }
  done_.record(kStream);
  done_.synchronize();  // the pass's one wait
  times_.forward = elapsed_ms_completed(started_, forwarded_) / 1e3;
  times_.sample = elapsed_ms_completed(forwarded_, done_) / 1e3;
  times_.device_timed = true;
}

std::span<const SampledToken> GpuForward::forward(const Batch& batch, KVCache& cache,
                                                  std::span<const SamplingJob> jobs) {
  run(batch, cache, jobs);
  return {host_picks_.data(), jobs.size()};
}

std::span<const float> GpuForward::forward(const Batch& batch, KVCache& cache) {
  run(batch, cache, {});
  return logits();
}

std::span<const float> GpuForward::logits() {
  if (!logits_fresh_) {
    host_logits_.resize(static_cast<std::size_t>(logit_rows_count_) * config().vocab_size);
    logits_.download(host_logits_, 0, kStream);  // synchronises: the span is ready on return
    logits_fresh_ = true;
  }
  return host_logits_;
}

}  // namespace kvheap
