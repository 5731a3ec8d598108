// When the CPU kernels split their work across OpenMP threads.
#pragma once

namespace kvheap::cpu {

/// \brief Products of fewer multiply-adds (n x in_dim x out_dim) run on one thread: below that
/// a parallel region costs more than it saves, and far more when other processes share the cores.
inline constexpr long kParallelMacs = 1L << 18;

/// \brief Element-wise kernels (norms, RoPE, SwiGLU, residual adds) over fewer elements run on
/// one thread. A decode row's stay there; a prompt's or a batch's split across the threads, which
/// would otherwise wait at the next product while one thread did them alone.
inline constexpr long kParallelElements = 1L << 15;

}  // namespace kvheap::cpu
