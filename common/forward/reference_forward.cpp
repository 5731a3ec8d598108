#include "common/forward/reference_forward.hpp"

#include <Eigen/Core>
#include <cmath>
#include <cstring>

#include "common/forward/forward_cpu.hpp"
#include "common/model/rope_freqs.hpp"
#include "kernels/matmul.hpp"
#include "kernels/qk_norm.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/swiglu.hpp"

namespace kvheap {

namespace {

/// out[n, out_dim] = x[n, in_dim] W^T with Eigen's general product on W as loaded, not the
/// forward pass's packed kernel: the oracle shares no matrix code with what it checks.
void product(float* out, const float* x, const float* w, int n, int in_dim, int out_dim) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<RowMajor>(out, n, out_dim).noalias() =
      Eigen::Map<const RowMajor>(x, n, in_dim) *
      Eigen::Map<const RowMajor>(w, out_dim, in_dim).transpose();
}

}  // namespace

std::vector<float> reference_logits(const ModelWeights& w, std::span<const int> tokens,
                                    int first_pos) {
  const ModelConfig& c = w.config;
  Batch check;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    check.rows.push_back({tokens[i], 0, first_pos + static_cast<int>(i), true});
  validate_batch(check, c);
  check_qk_norm_gains(w);

  const int n = static_cast<int>(tokens.size());
  const long d = c.dim;
  std::vector<float> x(n * d), xn(n * d), q(n * c.q_dim()), k(n * c.kv_dim()), v(n * c.kv_dim()),
      att(n * c.q_dim()), proj(n * d), gate(static_cast<long>(n) * c.hidden_dim),
      up(static_cast<long>(n) * c.hidden_dim), scores(n);
  std::vector<int> pos(n);
  for (int i = 0; i < n; ++i) {
    pos[i] = first_pos + i;
    std::memcpy(&x[i * d], w.token_embedding + static_cast<long>(tokens[i]) * d, sizeof(float) * d);
  }
  const std::vector<float> inv_freq = rope_inv_freq(c);
  const bool interleaved = c.rope_style == RopeStyle::Interleaved;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    cpu::rmsnorm(xn.data(), x.data(), L.attn_norm, n, c.dim, c.norm_eps);
    product(q.data(), xn.data(), L.wq, n, c.dim, c.q_dim());
    product(k.data(), xn.data(), L.wk, n, c.dim, c.kv_dim());
    product(v.data(), xn.data(), L.wv, n, c.dim, c.kv_dim());
    cpu::add_bias(q.data(), L.bq, n, c.q_dim());
    cpu::add_bias(k.data(), L.bk, n, c.kv_dim());
    cpu::add_bias(v.data(), L.bv, n, c.kv_dim());
    if (c.qk_norm)  // Qwen3: each head of q and k normalised before RoPE
      cpu::qk_norm(q.data(), k.data(), L.q_norm, L.k_norm, n, c.n_heads, c.n_kv_heads, c.head_dim,
                   c.norm_eps);
    cpu::rope(q.data(), pos.data(), n, c.n_heads, c.head_dim, inv_freq.data(), interleaved);
    cpu::rope(k.data(), pos.data(), n, c.n_kv_heads, c.head_dim, inv_freq.data(), interleaved);
    // Full causal attention, one (row, head) at a time, in double for the softmax sums.
    for (int i = 0; i < n; ++i) {
      for (int h = 0; h < c.n_heads; ++h) {
        const int g = h / c.group_size();
        const float* qh = &q[(static_cast<long>(i) * c.n_heads + h) * c.head_dim];
        double m = -INFINITY;
        for (int t = 0; t <= i; ++t) {
          const float* kt = &k[(static_cast<long>(t) * c.n_kv_heads + g) * c.head_dim];
          double dot = 0.0;
          for (int e = 0; e < c.head_dim; ++e) dot += double{qh[e]} * kt[e];
          scores[t] = static_cast<float>(dot * scale);
          m = std::max(m, double{scores[t]});
        }
        double sum = 0.0;
        std::vector<double> acc(c.head_dim, 0.0);
        for (int t = 0; t <= i; ++t) {
          const double p = std::exp(scores[t] - m);
          sum += p;
          const float* vt = &v[(static_cast<long>(t) * c.n_kv_heads + g) * c.head_dim];
          for (int e = 0; e < c.head_dim; ++e) acc[e] += p * vt[e];
        }
        float* out = &att[(static_cast<long>(i) * c.n_heads + h) * c.head_dim];
        for (int e = 0; e < c.head_dim; ++e) out[e] = static_cast<float>(acc[e] / sum);
      }
    }
    product(proj.data(), att.data(), L.wo, n, c.q_dim(), c.dim);
    cpu::residual_add(x.data(), proj.data(), n * d);
    cpu::rmsnorm(xn.data(), x.data(), L.ffn_norm, n, c.dim, c.norm_eps);
    product(gate.data(), xn.data(), L.w1, n, c.dim, c.hidden_dim);
    product(up.data(), xn.data(), L.w3, n, c.dim, c.hidden_dim);
    cpu::swiglu(gate.data(), up.data(), static_cast<long>(n) * c.hidden_dim);
    product(proj.data(), gate.data(), L.w2, n, c.hidden_dim, c.dim);
    cpu::residual_add(x.data(), proj.data(), n * d);
  }
  cpu::rmsnorm(xn.data(), x.data(), w.final_norm, n, c.dim, c.norm_eps);
  std::vector<float> logits(static_cast<std::size_t>(n) * c.vocab_size);
  product(logits.data(), xn.data(), w.classifier, n, c.dim, c.vocab_size);
  return logits;
}

}  // namespace kvheap
