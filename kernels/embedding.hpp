// Embedding lookup: gather rows of a [rows, dim] table (fp32, fp16 or bf16) into fp32 rows.
//
// The same gather serves twice in the forward pass: token ids into the embedding table, and the
// rows that want logits out of the residual stream before the classifier.
#pragma once

#include "base/dtype.hpp"
#include "kernels/cuda_stream.hpp"

namespace kvheap::cpu {

/// \brief x[r] = table[ids[r]] widened to fp32, for r < n.
/// \param x     [n, dim] written
/// \param ids   [n] row of the table for each output row
/// \param table [table_rows, dim] of `table_dtype`: float, or raw fp16/bf16 bits (uint16)
///
/// An id outside [0, table_rows) fills its row with NaN: the caller validates ids (the forward
/// pass does, with a message), and a NaN row makes a missed check loud instead of reading out of
/// bounds.
void embedding(float* x, const int* ids, const void* table, DType table_dtype, int n, int dim,
               int table_rows);

}  // namespace kvheap::cpu

namespace kvheap::cuda {

/// \brief CUDA twin of cpu::embedding on device memory (embedding.cu): one block per output row.
/// \param x     [n, dim] written
/// \param ids   [n]
/// \param table [table_rows, dim] of `table_dtype` (float, __half or __nv_bfloat16)
void embedding(float* x, const int* ids, const void* table, DType table_dtype, int n, int dim,
               int table_rows, StreamHandle stream = nullptr);

/// \brief out[r] = src[rows[r]] for fp32 rows on device memory: the embedding gather, applied to
/// activations (e.g. picking the rows that want logits).
/// \param out  [n, dim] written
/// \param rows [n] indices into src
/// \param src  [src_rows, dim]
inline void gather_rows(float* out, const int* rows, const float* src, int n, int dim, int src_rows,
                        StreamHandle stream = nullptr) {
  embedding(out, rows, src, DType::F32, n, dim, src_rows, stream);
}

}  // namespace kvheap::cuda
