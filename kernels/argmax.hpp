// Greedy decoding on the device: the index of the largest logit of each row.
#pragma once

#include "kernels/cuda_stream.hpp"

namespace kvheap::cpu {

/// \brief ids[r] = index of the largest of logits[r, :], ties to the lowest index (as
/// kvheap::argmax); -1 for a row holding a NaN, which the caller turns into an error. Throws
/// InputError when vocab < 1.
/// \param ids    [rows] written
/// \param logits [rows, vocab]
void argmax_rows(int* ids, const float* logits, int rows, int vocab);

}  // namespace kvheap::cpu

namespace kvheap::cuda {

/// \brief CUDA twin of cpu::argmax_rows on device memory (argmax.cu): one block per row, a
/// (value, index) reduction through warp shuffles and shared memory.
/// \param ids    [rows] written
/// \param logits [rows, vocab]
void argmax_rows(int* ids, const float* logits, int rows, int vocab, StreamHandle stream = nullptr);

}  // namespace kvheap::cuda
