// The GPU forward pass, top to bottom: embed, then per layer attention and MLP, then classifier.
// Read it beside common/forward_cpu.cpp: the steps and their order are the same, each CPU call
// replaced by its CUDA twin (kernels/*.hpp) or a device GEMM.
#include "common/gpu/forward_gpu.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.hpp"
#include "common/forward_cpu.hpp"
#include "common/rope_freqs.hpp"
#include "kernels/argmax.hpp"
#include "kernels/cast.hpp"
#include "kernels/embedding.hpp"
#include "kernels/qk_norm.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/swiglu.hpp"

namespace kvheap {
namespace {

// Every launch, copy and GEMM goes to the default stream (see the class comment).
constexpr cudaStream_t kStream = nullptr;

template <class T>
void grow(DeviceBuffer<T>& buffer, std::size_t count) {
  if (buffer.size() < count) buffer = DeviceBuffer<T>(count);  // contents need not survive
}

}  // namespace

GpuForward::GpuForward(const ModelWeights& weights, DType weight_dtype)
    : w_(weights, weight_dtype) {
  const std::vector<float> inv_freq = rope_inv_freq(config());
  inv_freq_ = DeviceBuffer<float>::from_host(inv_freq, kStream);
}

std::size_t GpuForward::scratch_bytes() const noexcept {
  return tokens_.bytes() + pos_.bytes() + logit_rows_.bytes() + ids_.bytes() + x_.bytes() +
         xn_.bytes() + q_.bytes() + k_.bytes() + v_.bytes() + att_.bytes() + proj_.bytes() +
         gate_.bytes() + up_.bytes() + last_.bytes() + logits_.bytes() + narrow_.bytes();
}

void GpuForward::reserve(int n, int m) {
  const ModelConfig& c = config();
  const auto rows = static_cast<std::size_t>(n);
  const auto logit_rows = static_cast<std::size_t>(m);
  grow(tokens_, rows);
  grow(pos_, rows);
  grow(logit_rows_, logit_rows);
  grow(ids_, logit_rows);
  grow(x_, rows * c.dim);
  grow(xn_, rows * c.dim);
  grow(q_, rows * c.q_dim());
  grow(k_, rows * c.kv_dim());
  grow(v_, rows * c.kv_dim());
  grow(att_, rows * c.q_dim());
  grow(proj_, rows * c.dim);
  grow(gate_, rows * c.hidden_dim);
  grow(up_, rows * c.hidden_dim);
  grow(last_, logit_rows * c.dim);
  grow(logits_, logit_rows * c.vocab_size);
  if (w_.matrix_dtype() != DType::F32) {
    const int widest = std::max({c.dim, c.q_dim(), c.hidden_dim});
    grow(narrow_, rows * widest * dtype_size(w_.matrix_dtype()));
  }
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

int GpuForward::run(const Batch& batch, KVCache& cache) {
  const ModelConfig& c = config();
  validate_batch(batch, c);
  const int n = batch.size();
  const int m = batch.num_logit_rows();
  if (n == 0) return 0;
  reserve(n, m);
  const bool interleaved = c.rope_style == RopeStyle::Interleaved;
  const long n_dim = static_cast<long>(n) * c.dim;

  // The batch description: token ids, positions, and which rows want logits. host_ints_ can be
  // refilled right after each upload: a copy from pageable memory returns once the source has
  // been staged.
  host_ints_.clear();
  for (const BatchRow& row : batch.rows) host_ints_.push_back(row.token);
  tokens_.upload(host_ints_, 0, kStream);
  host_ints_.clear();
  for (const BatchRow& row : batch.rows) host_ints_.push_back(row.pos);
  pos_.upload(host_ints_, 0, kStream);
  host_ints_.clear();
  for (int r = 0; r < n; ++r)
    if (batch.rows[r].wants_logits) host_ints_.push_back(r);
  logit_rows_.upload(host_ints_, 0, kStream);

  cuda::embedding(x_.data(), tokens_.data(), w_.token_embedding().data(), w_.matrix_dtype(), n,
                  c.dim, c.vocab_size, kStream);
  cache.prepare(batch);  // once per batch: the cache uploads its slot offsets / page tables

  for (int l = 0; l < c.n_layers; ++l) {
    const DeviceLayerWeights& L = w_.layer(l);
    // Attention block: x += Wo * attend(rope(Wq xn), cache <- (rope(Wk xn), Wv xn)), with Qwen3's
    // per-head norm of q and k between the projection and RoPE.
    cuda::rmsnorm(xn_.data(), x_.data(), L.attn_norm.data(), n, c.dim, c.norm_eps, kStream);
    const void* xn = gemm_input(xn_.data(), n_dim);
    project(xn, L.wq, q_.data(), n);
    project(xn, L.wk, k_.data(), n);
    project(xn, L.wv, v_.data(), n);
    cuda::add_bias(q_.data(), L.bq.data(), n, c.q_dim(), kStream);  // no-ops without biases
    cuda::add_bias(k_.data(), L.bk.data(), n, c.kv_dim(), kStream);
    cuda::add_bias(v_.data(), L.bv.data(), n, c.kv_dim(), kStream);
    if (c.qk_norm)
      cuda::qk_norm(q_.data(), k_.data(), L.q_norm.data(), L.k_norm.data(), n, c.n_heads,
                    c.n_kv_heads, c.head_dim, c.norm_eps, kStream);
    cuda::rope(q_.data(), pos_.data(), n, c.n_heads, c.head_dim, inv_freq_.data(), interleaved,
               kStream);
    cuda::rope(k_.data(), pos_.data(), n, c.n_kv_heads, c.head_dim, inv_freq_.data(), interleaved,
               kStream);
    cache.write(l, batch, k_.data(), v_.data());
    cache.attend(l, batch, q_.data(), att_.data());
    project(gemm_input(att_.data(), static_cast<long>(n) * c.q_dim()), L.wo, proj_.data(), n);
    cuda::residual_add(x_.data(), proj_.data(), n_dim, kStream);

    // MLP block: x += W2 (silu(W1 xn) * W3 xn).
    cuda::rmsnorm(xn_.data(), x_.data(), L.ffn_norm.data(), n, c.dim, c.norm_eps, kStream);
    const void* xn2 = gemm_input(xn_.data(), n_dim);
    project(xn2, L.w1, gate_.data(), n);
    project(xn2, L.w3, up_.data(), n);
    const long n_hidden = static_cast<long>(n) * c.hidden_dim;
    cuda::swiglu(gate_.data(), up_.data(), n_hidden, kStream);
    project(gemm_input(gate_.data(), n_hidden), L.w2, proj_.data(), n);
    cuda::residual_add(x_.data(), proj_.data(), n_dim, kStream);
  }

  // Classifier only for rows that want logits: in a prompt that is just the last row, which saves
  // the largest matrix product of a prefill.
  if (m > 0) {
    cuda::gather_rows(last_.data(), logit_rows_.data(), x_.data(), m, c.dim, n, kStream);
    cuda::rmsnorm(last_.data(), last_.data(), w_.final_norm().data(), m, c.dim, c.norm_eps,
                  kStream);
    project(gemm_input(last_.data(), static_cast<long>(m) * c.dim), w_.classifier(), logits_.data(),
            m);
  }
  return m;
}

std::span<const float> GpuForward::forward(const Batch& batch, KVCache& cache) {
  const int m = run(batch, cache);
  host_logits_.resize(static_cast<std::size_t>(m) * config().vocab_size);
  logits_.download(host_logits_, 0, kStream);  // synchronises: the span is ready on return
  return host_logits_;
}

std::vector<int> GpuForward::forward_greedy(const Batch& batch, KVCache& cache) {
  const int m = run(batch, cache);
  std::vector<int> ids(static_cast<std::size_t>(m));
  if (m == 0) return ids;
  cuda::argmax_rows(ids_.data(), logits_.data(), m, config().vocab_size, kStream);
  ids_.download(ids, 0, kStream);
  for (int j = 0, r = 0; r < batch.size(); ++r) {
    if (!batch.rows[r].wants_logits) continue;
    if (ids[j] < 0) {
      throw InputError(
          fmt::format("the logits of batch row {} hold a NaN: the forward pass "
                      "produced an invalid value",
                      r));
    }
    ++j;
  }
  return ids;
}

}  // namespace kvheap
