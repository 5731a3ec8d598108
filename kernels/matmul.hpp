// Matrix products against weight matrices packed once for an outer-product kernel: out = x W^T.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>

#include "base/dtype.hpp"
#include "kernels/cpu_threads.hpp"

namespace kvheap::cpu {

/// \brief A weight matrix W [out_dim, in_dim] repacked, once, in the order matmul reads it.
///
/// The output columns are cut into panels of panel_width() columns (the last one zero-padded).
/// A panel stores, for each input index k in turn, its columns' weights W[j, k]: one contiguous
/// stream that the kernel reads front to back, whatever the number of batch rows. Elements are
/// fp32, or bf16 or fp16 rounded to nearest even from the fp32 weights; the narrow ones are
/// widened to fp32 in registers as they are loaded, so a decode step reads half the bytes.
class PackedMatrix {
 public:
  PackedMatrix() = default;
  /// \brief Packs row-major fp32 W [out_dim, in_dim] as `dtype`, the panels split across
  /// OpenMP threads (so a memory-mapped W is read, and its pages faulted in, in parallel).
  /// Throws ResourceError when the memory cannot be had.
  PackedMatrix(const float* w, int out_dim, int in_dim, DType dtype);

  /// \brief Rows of W: the product's output columns.
  [[nodiscard]] int out_dim() const { return out_dim_; }
  /// \brief Columns of W: the product's input length.
  [[nodiscard]] int in_dim() const { return in_dim_; }
  /// \brief Element type as stored.
  [[nodiscard]] DType dtype() const { return dtype_; }
  /// \brief Output columns per panel (depends on the dtype and the target's vector registers).
  [[nodiscard]] int panel_width() const { return width_; }
  /// \brief Number of panels: out_dim rounded up to whole panels.
  [[nodiscard]] int panels() const { return panels_; }
  /// \brief Bytes held, padding included: what one product reads.
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  /// \brief First element of panel `q` (64-byte aligned).
  [[nodiscard]] const void* panel(int q) const {
    return data_.get() + static_cast<std::size_t>(q) * panel_bytes();
  }

 private:
  [[nodiscard]] std::size_t panel_bytes() const {
    return static_cast<std::size_t>(width_) * in_dim_ * dtype_size(dtype_);
  }
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> data_;
  std::size_t bytes_ = 0;
  int out_dim_ = 0, in_dim_ = 0, width_ = 0, panels_ = 0;
  DType dtype_ = DType::F32;
};

/// \brief out[n, out_dim] = x[n, in_dim] * W^T, the panels split across OpenMP threads.
/// out must not overlap x.
///
/// Each output element is one chain of multiply-adds over k = 0, 1, ..., in_dim - 1 in that order,
/// held in one vector lane: its rounding depends on in_dim alone. So a row's outputs are bitwise
/// the same whatever other rows share its batch, however many rows that is, and whatever the
/// thread count: a decode row alone, in a batch of 64 or in a prompt gives the same numbers.
void matmul(float* out, const float* x, const PackedMatrix& w, int n);

/// \brief Which loops matmul runs for weights of `dtype` on this build: vector width, block
/// shape and how narrow weights are widened (for reports).
[[nodiscard]] std::string matmul_path(DType dtype);

/// \brief out[n, dim] += bias[dim] broadcast over rows (no-op when bias is null).
void add_bias(float* out, const float* bias, int n, int dim);

}  // namespace kvheap::cpu
