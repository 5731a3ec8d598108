// Host-side entry points of the test kernels in tests/device/sim_kernels.cu, which exercise the
// device layer and the CPU simulator (barriers, warp intrinsics, atomics, shared memory, faults).
// Plain C++ so test_simulator.cpp compiles with the host compiler in both CUDA builds. Every
// pointer argument is device memory; every function launches through kvheap::launch (and so throws
// kvheap::LaunchError on failure).
#pragma once

#include <cuda_runtime_api.h>

namespace kvheap::test {

/// \brief Which shuffle a warp reduction uses.
enum class WarpReduce { Xor, Down };

/// \brief sums[b] = sum of values[b * threads_per_block + t] over the threads t of block b (blocks
/// numbered x-fastest), reduced through warp shuffles and shared memory.
/// \param values [blocks * threads_per_block]
/// \param sums   [blocks]
void block_sum(const long long* values, long long* sums, dim3 grid, dim3 block, WarpReduce how);

/// \brief Per thread t of a 1-D launch: ballot of (lane % 3 == 0), __any_sync(lane == 5),
/// __all_sync(true), __all_sync(lane is even), and __syncthreads_count(t is odd).
/// \param ballot, any, all_true, all_even, count  each [total threads]
void votes(unsigned* ballot, int* any, int* all_true, int* all_even, int* count, dim3 grid,
           dim3 block);

/// \brief Per thread of one block: value = 10 * lane + 1 shuffled with idx(src), up(delta),
/// down(delta), xor(mask) at `width`, and a __half value shuffled with xor 1.
/// \param out [5 * block.x]: idx, up, down, xor results, then the __half result as float
void shuffles(int* out_idx, int* out_up, int* out_down, int* out_xor, float* out_half, int src,
              int delta, int lane_mask, int width, int threads);

/// \brief Every thread adds 1 to *count, its global id to *id_sum, 1.0f to *float_sum, takes
/// atomicMax of its id into *max_id and increments *cas_count with an atomicCAS loop; thread 0
/// of each block writes the simulator worker that ran it to worker_of_block[block] (0 on a GPU).
void atomics(int* count, unsigned long long* id_sum, float* float_sum, int* max_id,
             unsigned* cas_count, int* worker_of_block, dim3 grid, dim3 block);

/// \brief Blocks fill a static __shared__ tile (and a __device__ helper's own __shared__ array)
/// with block-specific values, cross a few barriers, and count in *errors every value that is
/// not their own.
void static_smem(int* errors, dim3 grid, dim3 block);

/// \brief Bytes of the static array dynamic_smem's kernel declares. On a GPU they count against
/// the same 48 KiB as the dynamic bytes (without the opt-in attribute); the simulator, which
/// cannot see a kernel's static shared memory before it runs, checks the dynamic bytes alone.
inline constexpr unsigned kDynamicSmemKernelStaticBytes = 32 * sizeof(unsigned);

/// \brief Like static_smem with the launch's dynamic shared memory (`smem_bytes`) plus a static
/// array of kDynamicSmemKernelStaticBytes, also counting in *errors any overlap between the two.
void dynamic_smem(int* errors, dim3 grid, dim3 block, unsigned smem_bytes);

/// \brief x[i] = value for i < n; a grid-stride loop.
void fill(float* x, float value, int n, dim3 grid, dim3 block, cudaStream_t stream = nullptr);

/// \brief Writes x[n + past_end] from thread 0: an out-of-bounds write for the fault tests.
void write_past_end(float* x, int n, int past_end);

/// \brief One 1-D block of `threads` (a multiple of 32): each thread carries eight 64-bit values
/// and a double through `rounds` rounds of arithmetic, a lane-pair shuffle and a __syncthreads,
/// and writes their XOR to out[t]. test_simulator.cpp computes the same on the host.
/// \param out [threads]
void carried_state(unsigned long long* out, int threads, int rounds);

/// \brief A 64-thread block whose first warp alone calls __syncthreads.
void sync_in_first_warp_only(int* out);
/// \brief Odd and even threads call two different __syncthreads.
void sync_at_two_sites(int* out);
/// \brief Lanes 0-15 wait in __syncwarp(0xffffffff) while lanes 16-31 go on to __syncthreads.
void mismatched_syncwarp(int* out);
/// \brief Every lane calls __syncwarp(0x1): lanes other than 0 are not in their own mask.
void syncwarp_without_own_lane(int* out);

/// \brief 64 threads copy src[0, 512) into shared memory with __pipeline_memcpy_async in two
/// batches (the second zero-fills the last two floats of each 16-byte copy) and record their own
/// slots: `before` [256] before any wait, `first_only` [512] after __pipeline_wait_prior(1),
/// `after` [512] after __pipeline_wait_prior(0).
void async_copy(const float* src, float* before, float* first_only, float* after);
/// \brief One thread queues an asynchronous copy and returns without waiting for it.
void async_copy_left_pending(const float* src);

/// \brief One warp computes D = C + repeat x A B with kernels/mma.cuh's m16n8k16 product (fp16
/// or bf16 inputs given as their bits, fp32 C and D); lanes from `lanes` on return before it, and
/// with `two_sites` odd lanes call the product from a second call site.
/// \param a [16][16] row-major  \param b [16][8] (k x n)  \param c, d [16][8]
void mma_tile(bool bf16, const unsigned short* a, const unsigned short* b, const float* c, float* d,
              int repeat, int lanes = 32, bool two_sites = false);

/// \brief One warp loads four 8 x 8 matrices of 16-bit values through shared memory with
/// kernels/mma.cuh's ldmatrix (x4, `trans` or not); out[lane * 4 + j] is the lane's register j.
/// \param in [4][8][8]  \param out [32][4]
void ldmatrix_tile(const unsigned short* in, unsigned* out, bool trans);

/// \brief Sets cudaFuncAttributeMaxDynamicSharedMemorySize of the big-shared-memory kernel.
void set_big_smem_limit(int bytes);
/// \brief Runs a kernel that writes and checks `smem_bytes` of dynamic shared memory;
/// *errors counts bad reads.
void big_smem(int* errors, unsigned smem_bytes);

/// \brief Blocks of fill's kernel (or big_smem's) one SM holds at `threads` per block and
/// `smem_bytes` of dynamic shared memory (kvheap::max_active_blocks).
int fill_blocks_per_sm(int threads, unsigned smem_bytes);
/// \copydoc fill_blocks_per_sm
int big_smem_blocks_per_sm(int threads, unsigned smem_bytes);

}  // namespace kvheap::test
