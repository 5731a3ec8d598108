// When the CPU kernels split their work across OpenMP threads.
#pragma once

namespace kvheap::cpu {

/// \brief Products of fewer multiply-adds (n x in_dim x out_dim) run on one thread: below that
/// a parallel region costs more than it saves, and far more when other processes share the cores.
/// 2^16 puts stories15m's one-row products (288 x 288 and 288 x 768) on every thread, where they
/// take half the time they take on one (docs/results/matmul-cpu-amd-epyc-zen4.md).
inline constexpr long kParallelMacs = 1L << 16;

/// \brief Element-wise kernels (norms, RoPE, SwiGLU, residual adds) over fewer elements run on
/// one thread. A decode row's stay there; a prompt's or a batch's split across the threads, which
/// would otherwise wait at the next product while one thread did them alone.
inline constexpr long kParallelElements = 1L << 15;

}  // namespace kvheap::cpu
