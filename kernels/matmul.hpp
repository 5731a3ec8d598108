// Matrix products against weight matrices packed once for an outer-product kernel: out = x W^T.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>

#include "base/dtype.hpp"
#include "kernels/cpu_threads.hpp"

namespace kvheap::cpu {

/// \brief How matmul multiplies bf16 weights.
enum class Bf16Products {
  kWiden,  ///< widened to fp32 in registers: fp32 products of the rounded weights (any CPU)
  kPairs,  ///< AVX512-BF16's vdpbf16ps, two products a lane per instruction: the activations
           ///< are rounded to bf16 too, as a GPU's bf16 GEMM rounds them, so nothing runs it by
           ///< default (bench_matmul_cpu times both; docs/pages/cpu_twin.md says why widen)
};

/// \brief Whether this build targets a CPU with AVX512-BF16, so that kPairs can run.
[[nodiscard]] bool bf16_pairs_built();

/// \brief A weight matrix W [out_dim, in_dim] repacked, once, in the order matmul reads it.
///
/// The output columns are cut into panels of panel_width() columns (the last one zero-padded).
/// A panel stores, for each input index k in turn, its columns' weights W[j, k]: one contiguous
/// stream that the kernel reads front to back, whatever the number of batch rows. Elements are
/// fp32, or bf16 or fp16 rounded to nearest even from the fp32 weights, so a decode step reads
/// half the bytes. fp16 is widened to fp32 in registers as it is loaded, bf16 too or, with
/// Bf16Products::kPairs, stored as pairs of input indices that vdpbf16ps multiplies by the
/// activations rounded to bf16.
class PackedMatrix {
 public:
  PackedMatrix() = default;
  /// \brief Packs row-major fp32 W [out_dim, in_dim] as `dtype`, the panels split across
  /// OpenMP threads (so a memory-mapped W is read, and its pages faulted in, in parallel).
  /// `bf16` applies to bf16 only. Throws ResourceError when the memory cannot be had, InputError
  /// for kPairs in a build without AVX512-BF16.
  PackedMatrix(const float* w, int out_dim, int in_dim, DType dtype,
               Bf16Products bf16 = Bf16Products::kWiden);

  /// \brief Bytes a PackedMatrix of this shape and type holds, before allocating it.
  [[nodiscard]] static std::size_t bytes_for(int out_dim, int in_dim, DType dtype,
                                             Bf16Products bf16 = Bf16Products::kWiden);

  /// \brief Rows of W: the product's output columns.
  [[nodiscard]] int out_dim() const { return out_dim_; }
  /// \brief Columns of W: the product's input length.
  [[nodiscard]] int in_dim() const { return in_dim_; }
  /// \brief Element type as stored.
  [[nodiscard]] DType dtype() const { return dtype_; }
  /// \brief How bf16 weights are multiplied (as given; fp32 and fp16 ignore it).
  [[nodiscard]] Bf16Products bf16_products() const { return bf16_; }
  /// \brief Output columns per panel (depends on the dtype and the target's vector registers).
  [[nodiscard]] int panel_width() const { return width_; }
  /// \brief Number of panels: out_dim rounded up to whole panels.
  [[nodiscard]] int panels() const { return panels_; }
  /// \brief Bytes held, padding included: what one product reads.
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  /// \brief First element of panel `q` (the panels lie back to back from a 64-byte boundary).
  [[nodiscard]] const void* panel(int q) const {
    return data_.get() + static_cast<std::size_t>(q) * panel_bytes_;
  }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> data_;
  std::size_t bytes_ = 0, panel_bytes_ = 0;
  int out_dim_ = 0, in_dim_ = 0, width_ = 0, panels_ = 0;
  DType dtype_ = DType::F32;
  Bf16Products bf16_ = Bf16Products::kWiden;
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
/// shape and how narrow weights are multiplied (for reports).
[[nodiscard]] std::string matmul_path(DType dtype, Bf16Products bf16 = Bf16Products::kWiden);

/// \brief out[n, dim] += bias[dim] broadcast over rows (no-op when bias is null).
void add_bias(float* out, const float* bias, int n, int dim);

}  // namespace kvheap::cpu
