// The activations a forward pass keeps for a batch: the same nine arrays on the CPU and the GPU,
// each sized here, once, from the model's shape.
#pragma once

#include <cstddef>
#include <initializer_list>

#include "common/model/model_config.hpp"

namespace kvheap {

/// \brief The activations of one forward pass over a batch of n rows, each a row-major [n, width]
/// array in a buffer type of the backend's (std::vector<float> on the CPU, DeviceBuffer<float>
/// on the GPU).
template <class Buffer>
struct Activations {
  Buffer x;     ///< [n, dim] residual stream
  Buffer xn;    ///< [n, dim] normalised input of a sub-block
  Buffer q;     ///< [n, q_dim] queries
  Buffer k;     ///< [n, kv_dim] keys
  Buffer v;     ///< [n, kv_dim] values
  Buffer att;   ///< [n, q_dim] attention output
  Buffer proj;  ///< [n, dim] a sub-block's output projection
  Buffer gate;  ///< [n, hidden_dim] feed-forward gate
  Buffer up;    ///< [n, hidden_dim] feed-forward up projection

  /// \brief Calls `size(buffer, floats)` for each array, with the floats it needs for `rows`
  /// rows of model `c`: the backend resizes or grows its buffers there.
  template <class Size>
  void size_for(const ModelConfig& c, std::size_t rows, Size&& size) {
    const auto dim = static_cast<std::size_t>(c.dim);
    const auto q_dim = static_cast<std::size_t>(c.q_dim());
    const auto kv_dim = static_cast<std::size_t>(c.kv_dim());
    const auto hidden = static_cast<std::size_t>(c.hidden_dim);
    for (Buffer* b : {&x, &xn, &proj}) size(*b, rows * dim);
    for (Buffer* b : {&q, &att}) size(*b, rows * q_dim);
    for (Buffer* b : {&k, &v}) size(*b, rows * kv_dim);
    for (Buffer* b : {&gate, &up}) size(*b, rows * hidden);
  }

  /// \brief Calls `f(buffer)` for each array (to sum their bytes, say).
  template <class F>
  void each(F&& f) const {
    for (const Buffer* b : {&x, &xn, &q, &k, &v, &att, &proj, &gate, &up}) f(*b);
  }
};

}  // namespace kvheap
