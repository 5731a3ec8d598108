// The CPU forward pass, top to bottom: embed, then per layer attention and MLP, then classifier.
#include "common/forward/forward_cpu.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "base/error.hpp"
#include "common/measure/bandwidth.hpp"
#include "common/model/rope_freqs.hpp"
#include "kernels/matmul.hpp"
#include "kernels/qk_norm.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/swiglu.hpp"

namespace kvheap {

void validate_batch(const Batch& batch, const ModelConfig& c) {
  for (int i = 0; i < batch.size(); ++i) {
    const BatchRow& r = batch.rows[i];
    if (r.token < 0 || r.token >= c.vocab_size)
      throw InputError(
          fmt::format("token id {} (batch row {}) is out of range: the model's "
                      "vocabulary has {} tokens (ids 0..{})",
                      r.token, i, c.vocab_size, c.vocab_size - 1));
    if (r.pos < 0 || r.pos >= c.max_seq_len)
      throw InputError(
          fmt::format("position {} (batch row {}) is outside the model's context of "
                      "{} tokens",
                      r.pos, i, c.max_seq_len));
  }
}

void check_qk_norm_gains(const ModelWeights& w) {
  if (!w.config.qk_norm) return;
  for (std::size_t l = 0; l < w.layers.size(); ++l)
    if (w.layers[l].q_norm == nullptr || w.layers[l].k_norm == nullptr)
      throw InputError(fmt::format(
          "weights: layer {} has no q_norm/k_norm gains ([head_dim = {}] each), but the "
          "config asks for per-head q/k RMSNorm (Qwen3)",
          l, w.config.head_dim));
}

namespace {

/// A weight matrix as loaded, and its shape [out_dim, in_dim].
struct Matrix {
  const float* w;
  int out_dim, in_dim;
};

/// A layer's seven matrices, in the order of CpuForward::PackedLayer's members.
std::array<Matrix, 7> layer_matrices(const LayerWeights& L, const ModelConfig& c) {
  return {{{L.wq, c.q_dim(), c.dim},
           {L.wk, c.kv_dim(), c.dim},
           {L.wv, c.kv_dim(), c.dim},
           {L.wo, c.dim, c.q_dim()},
           {L.w1, c.hidden_dim, c.dim},
           {L.w2, c.dim, c.hidden_dim},
           {L.w3, c.hidden_dim, c.dim}}};
}

}  // namespace

CpuForward::CpuForward(const ModelWeights& weights, DType weight_dtype, cpu::Bf16Products bf16)
    : w_(weights), weight_dtype_(weight_dtype), inv_freq_(rope_inv_freq(weights.config)) {
  check_qk_norm_gains(weights);
  const ModelConfig& c = weights.config;
  // The packed copy is the weights' second copy in memory: refuse it by name rather than let
  // packing touch more pages than the host has.
  const Matrix classifier{weights.classifier, c.vocab_size, c.dim};
  const auto bytes = [&](const Matrix& m) {
    return cpu::PackedMatrix::bytes_for(m.out_dim, m.in_dim, weight_dtype, bf16);
  };
  packed_bytes_ = bytes(classifier);
  for (const LayerWeights& L : weights.layers)
    for (const Matrix& m : layer_matrices(L, c)) packed_bytes_ += bytes(m);
  require_host_memory(
      packed_bytes_,
      fmt::format("packing {}'s weight matrices for the CPU's products ({}, a copy beside the "
                  "loaded weights)",
                  c.name, dtype_name(weight_dtype)),
      weight_dtype == DType::F32 ? "--weight-dtype bf16 halves it; or run a smaller model"
                                 : "run a smaller model");
  const auto t0 = std::chrono::steady_clock::now();
  const auto pack = [&](const Matrix& m) {
    return cpu::PackedMatrix(m.w, m.out_dim, m.in_dim, weight_dtype, bf16);
  };
  layers_.reserve(weights.layers.size());
  for (const LayerWeights& L : weights.layers) {
    const std::array<Matrix, 7> m = layer_matrices(L, c);
    layers_.push_back(
        {pack(m[0]), pack(m[1]), pack(m[2]), pack(m[3]), pack(m[4]), pack(m[5]), pack(m[6])});
  }
  classifier_ = pack(classifier);
  pack_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CpuForward::resize(int n) {
  const ModelConfig& c = w_.config;
  const auto rows = static_cast<std::size_t>(n);
  a_.size_for(c, rows, [](std::vector<float>& b, std::size_t floats) { b.resize(floats); });
  pos_.resize(rows);
}

void CpuForward::prepare(const Batch& batch, KVCache& cache) {
  prepared_ = false;  // a prepare() that throws leaves nothing prepared
  validate_batch(batch, w_.config);
  const auto t0 = std::chrono::steady_clock::now();
  cache.prepare(batch);
  prepare_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  prepared_ = true;
}

std::span<const float> CpuForward::forward(const Batch& batch, KVCache& cache) {
  const ModelConfig& c = w_.config;
  if (prepared_)  // checked again: a pass given another batch than the one prepared is refused
    validate_batch(batch, c);
  else
    prepare(batch, cache);
  prepared_ = false;
  const int n = batch.size();
  resize(n);
  const bool interleaved = c.rope_style == RopeStyle::Interleaved;

  for (int r = 0; r < n; ++r) {
    std::memcpy(&a_.x[static_cast<std::size_t>(r) * c.dim],
                w_.token_embedding + static_cast<std::size_t>(batch.rows[r].token) * c.dim,
                sizeof(float) * c.dim);
    pos_[r] = batch.rows[r].pos;
  }

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    const PackedLayer& P = layers_[l];
    // Attention block: x += Wo * attend(rope(Wq xn), cache <- (rope(Wk xn), Wv xn)), with Qwen3's
    // per-head norm of q and k between the projection and RoPE.
    cpu::rmsnorm(a_.xn.data(), a_.x.data(), L.attn_norm, n, c.dim, c.norm_eps);
    cpu::matmul(a_.q.data(), a_.xn.data(), P.wq, n);
    cpu::matmul(a_.k.data(), a_.xn.data(), P.wk, n);
    cpu::matmul(a_.v.data(), a_.xn.data(), P.wv, n);
    cpu::add_bias(a_.q.data(), L.bq, n, c.q_dim());
    cpu::add_bias(a_.k.data(), L.bk, n, c.kv_dim());
    cpu::add_bias(a_.v.data(), L.bv, n, c.kv_dim());
    if (c.qk_norm)
      cpu::qk_norm(a_.q.data(), a_.k.data(), L.q_norm, L.k_norm, n, c.n_heads, c.n_kv_heads,
                   c.head_dim, c.norm_eps);
    cpu::rope(a_.q.data(), pos_.data(), n, c.n_heads, c.head_dim, inv_freq_.data(), interleaved);
    cpu::rope(a_.k.data(), pos_.data(), n, c.n_kv_heads, c.head_dim, inv_freq_.data(), interleaved);
    cache.write(l, batch, a_.k.data(), a_.v.data());
    cache.attend(l, batch, a_.q.data(), a_.att.data());
    cpu::matmul(a_.proj.data(), a_.att.data(), P.wo, n);
    cpu::residual_add(a_.x.data(), a_.proj.data(), static_cast<long>(n) * c.dim);

    // MLP block: x += W2 (silu(W1 xn) * W3 xn).
    cpu::rmsnorm(a_.xn.data(), a_.x.data(), L.ffn_norm, n, c.dim, c.norm_eps);
    cpu::matmul(a_.gate.data(), a_.xn.data(), P.w1, n);
    cpu::matmul(a_.up.data(), a_.xn.data(), P.w3, n);
    cpu::swiglu(a_.gate.data(), a_.up.data(), static_cast<long>(n) * c.hidden_dim);
    cpu::matmul(a_.proj.data(), a_.gate.data(), P.w2, n);
    cpu::residual_add(a_.x.data(), a_.proj.data(), static_cast<long>(n) * c.dim);
  }

  // Classifier only for rows that want logits: in a prompt that is just the last row, which saves
  // the largest matrix product of a prefill.
  const int m = batch.num_logit_rows();
  last_.resize(static_cast<std::size_t>(m) * c.dim);
  logits_.resize(static_cast<std::size_t>(m) * c.vocab_size);
  int j = 0;
  for (int r = 0; r < n; ++r) {
    if (!batch.rows[r].wants_logits) continue;
    std::memcpy(&last_[static_cast<std::size_t>(j) * c.dim],
                &a_.x[static_cast<std::size_t>(r) * c.dim], sizeof(float) * c.dim);
    ++j;
  }
  if (m > 0) {
    cpu::rmsnorm(last_.data(), last_.data(), w_.final_norm, m, c.dim, c.norm_eps);
    cpu::matmul(logits_.data(), last_.data(), classifier_, m);
  }
  return {logits_.data(), logits_.size()};
}

}  // namespace kvheap
