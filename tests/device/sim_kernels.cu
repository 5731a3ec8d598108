// Test kernels for the device layer and the CPU simulator (see sim_kernels.hpp). They are written
// as ordinary CUDA: the same file runs on a GPU (KVHEAP_CUDA=real) and in the simulator.
#include "device/cuda_compat.hpp"
#include "device/device.hpp"
#include "device/launch.hpp"
#include "kernels/mma.cuh"
#include "tests/device/sim_kernels.hpp"

#if defined(KVHEAP_SIM)
#include <chrono>
#include <thread>
#endif

namespace kvheap::test {
namespace {

constexpr unsigned kFull = 0xffffffffu;

__device__ unsigned thread_in_block() {
  return threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
}
__device__ unsigned block_in_grid() {
  return blockIdx.x + blockIdx.y * gridDim.x + blockIdx.z * gridDim.x * gridDim.y;
}
__device__ unsigned threads_per_block() { return blockDim.x * blockDim.y * blockDim.z; }

template <bool UseXor>
__device__ long long warp_sum(long long v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v += UseXor ? __shfl_xor_sync(kFull, v, offset) : __shfl_down_sync(kFull, v, offset);
  }
  return v;  // every lane (xor) or lane 0 (down) holds the warp's sum
}

// Block sizes must be multiples of 32 here: full-mask shuffles read every lane.
template <bool UseXor>
__global__ void block_sum_kernel(const long long* values, long long* sums) {
  __shared__ long long warp_sums[32];
  const unsigned t = thread_in_block();
  const unsigned lane = t % 32;
  const unsigned warp = t / 32;
  const unsigned n_warps = threads_per_block() / 32;
  long long v = warp_sum<UseXor>(values[block_in_grid() * threads_per_block() + t]);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_sum<UseXor>(lane < n_warps ? warp_sums[lane] : 0);
    if (lane == 0) sums[block_in_grid()] = v;
  }
}

__global__ void votes_kernel(unsigned* ballot, int* any, int* all_true, int* all_even, int* count) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned lane = threadIdx.x % 32;
  ballot[t] = __ballot_sync(kFull, lane % 3 == 0);
  any[t] = __any_sync(kFull, lane == 5);
  all_true[t] = __all_sync(kFull, 1);
  all_even[t] = __all_sync(kFull, lane % 2 == 0);
  count[t] = __syncthreads_count(threadIdx.x % 2 == 1);
}

__global__ void shuffles_kernel(int* out_idx, int* out_up, int* out_down, int* out_xor,
                                float* out_half, int src, int delta, int lane_mask, int width) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int value = 10 * lane + 1;
  out_idx[threadIdx.x] = __shfl_sync(kFull, value, src, width);
  out_up[threadIdx.x] = __shfl_up_sync(kFull, value, static_cast<unsigned>(delta), width);
  out_down[threadIdx.x] = __shfl_down_sync(kFull, value, static_cast<unsigned>(delta), width);
  out_xor[threadIdx.x] = __shfl_xor_sync(kFull, value, lane_mask, width);
  const __half h = __float2half(static_cast<float>(lane) + 0.5f);
  out_half[threadIdx.x] = __half2float(__shfl_xor_sync(kFull, h, 1));
}

__global__ void atomics_kernel(int* count, unsigned long long* id_sum, float* float_sum,
                               int* max_id, unsigned* cas_count, int* worker_of_block) {
  const unsigned id = block_in_grid() * threads_per_block() + thread_in_block();
#if defined(KVHEAP_SIM)
  // Blocks go to whichever worker thread asks first, so on a loaded machine the launching thread
  // could run all 64 before another worker wakes, and nothing would run concurrently. Block 0
  // holds its worker until a block has started on another one (worker_of_block starts at -1),
  // or for at most 60 s, where there are other workers and blocks at all; the test then checks
  // that one did.
  const int me = sim::detail::current_worker();
  if (thread_in_block() == 0) {
    __atomic_store_n(&worker_of_block[block_in_grid()], me, __ATOMIC_RELEASE);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    const auto elsewhere = [&] {
      for (unsigned b = 1; b < gridDim.x * gridDim.y * gridDim.z; ++b) {
        const int w = __atomic_load_n(&worker_of_block[b], __ATOMIC_ACQUIRE);
        if (w >= 0 && w != me) return true;
      }
      return false;
    };
    const bool others = sim::worker_threads() > 1 && gridDim.x * gridDim.y * gridDim.z > 1;
    while (block_in_grid() == 0 && others && !elsewhere() &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
  }
#else
  if (thread_in_block() == 0) worker_of_block[block_in_grid()] = 0;
#endif
  atomicAdd(count, 1);
  atomicAdd(id_sum, static_cast<unsigned long long>(id));
  atomicAdd(float_sum, 1.0f);
  atomicMax(max_id, static_cast<int>(id));
  unsigned seen = *static_cast<volatile unsigned*>(cas_count);
  for (;;) {
    const unsigned before = atomicCAS(cas_count, seen, seen + 1);
    if (before == seen) break;
    seen = before;
  }
}

// A __device__ helper with its own __shared__ array: it too must be per block.
__device__ unsigned block_max(unsigned v) {
  __shared__ unsigned scratch;
  if (thread_in_block() == 0) scratch = 0;
  __syncthreads();
  atomicMax(&scratch, v);
  __syncthreads();
  const unsigned result = scratch;
  __syncthreads();
  return result;
}

__global__ void static_smem_kernel(int* errors) {
  __shared__ unsigned tile[1024];
  const unsigned t = thread_in_block();
  const unsigned n = threads_per_block();
  for (unsigned round = 0; round < 3; ++round) {
    const unsigned mine = (block_in_grid() * 7 + round) * 4096 + t;
    tile[t] = mine;
    __syncthreads();
    const unsigned other = (t + 1 + round) % n;
    if (tile[other] != mine - t + other) atomicAdd(errors, 1);
    if (block_max(t) != n - 1) atomicAdd(errors, 1);
    __syncthreads();
  }
}

__global__ void dynamic_smem_kernel(int* errors) {
  __shared__ unsigned fixed[kvheap::test::kDynamicSmemKernelStaticBytes / sizeof(unsigned)];
  unsigned* dyn = kvheap::dynamic_smem<unsigned>();
  const unsigned words = kvheap::dynamic_smem_bytes() / sizeof(unsigned);
  const unsigned t = thread_in_block();
  const unsigned n = threads_per_block();
  const unsigned tag = block_in_grid() * 100000u;
  if (t == 0) {
    const auto* a = reinterpret_cast<const char*>(dyn);
    const auto* b = reinterpret_cast<const char*>(fixed);
    if (a < b + sizeof fixed && b < a + words * sizeof(unsigned)) atomicAdd(errors, 1000);
  }
  if (t < 32) fixed[t] = tag + 77 + t;
  for (unsigned i = t; i < words; i += n) dyn[i] = tag + i;
  __syncthreads();
  for (unsigned i = (t + 5) % n; i < words; i += n) {
    if (dyn[i] != tag + i) atomicAdd(errors, 1);
  }
  if (t < 32 && fixed[31 - t] != tag + 77 + (31 - t)) atomicAdd(errors, 1);
}

__global__ void fill_kernel(float* x, float value, int n) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<int>(gridDim.x * blockDim.x)) {
    x[i] = value;
  }
}

__global__ void write_past_end_kernel(float* x, int n, int past_end) {
  if (threadIdx.x == 0) x[n + past_end] = 1.0f;
}

// Eight 64-bit values and a double per thread, more than the registers a switch saves, so some
// of them live on the thread's own stack; a barrier and a shuffle each round switch threads.
__global__ void carried_state_kernel(unsigned long long* out, int rounds) {
  const unsigned t = threadIdx.x;
  unsigned long long a = t + 1, b = 3ull * t + 7, c = t ^ 0x5555u, d = 0x9e3779b97f4a7c15ull * t;
  unsigned long long e = ~0ull - t, f = t << 20, g = 11, h = t * t;
  double x = t;
  for (int r = 0; r < rounds; ++r) {
    a = a * 6364136223846793005ull + b;
    b ^= a >> 13;
    c += static_cast<unsigned>(__shfl_xor_sync(kFull, static_cast<int>(a & 0xffff), 1));
    __syncthreads();
    d += c ^ (e >> 7);
    e = e * 3 + f;
    f ^= d + g;
    g += h | 1;
    h = (h >> 3) + a;
    x += 0.5;  // integers and halves: exact in any evaluation order
  }
  out[t] = a ^ b ^ c ^ d ^ e ^ f ^ g ^ h ^ static_cast<unsigned long long>(2 * x);
}

__global__ void sync_in_first_warp_only_kernel(int* out) {
  if (threadIdx.x < 32) __syncthreads();  // the bug under test: threads 32-63 skip it
  out[threadIdx.x] = 1;
}

__global__ void sync_at_two_sites_kernel(int* out) {
  if (threadIdx.x % 2 == 0) {  // NOLINT(bugprone-branch-clone): the two sites are the test
    __syncthreads();
  } else {
    __syncthreads();  // a second call site: a divergent barrier
  }
  out[threadIdx.x] = 1;
}

__global__ void mismatched_syncwarp_kernel(int* out) {
  if (threadIdx.x < 16) {
    __syncwarp(kFull);  // waits for lanes 16-31, which never come
  } else {
    __syncwarp(0xffff0000u);
  }
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void syncwarp_without_own_lane_kernel(int* out) {
  __syncwarp(0x1u);
  out[threadIdx.x] = 1;
}

__global__ void big_smem_kernel(int* errors) {
  unsigned char* bytes = kvheap::dynamic_smem<unsigned char>();
  const unsigned n = kvheap::dynamic_smem_bytes();
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x)
    bytes[i] = static_cast<unsigned char>(i * 13);
  __syncthreads();
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
    const unsigned j = n - 1 - i;
    if (bytes[j] != static_cast<unsigned char>(j * 13)) atomicAdd(errors, 1);
  }
}

// 64 threads: each queues two 16-byte copies from src into shared memory, in two batches, the
// second zero-filling its last 8 bytes, and records what it reads of its own slots before any
// wait, after landing the first batch only, and after landing both.
__global__ void async_copy_kernel(const float* src, float* before, float* first_only,
                                  float* after) {
  __shared__ __align__(16) float buf[2][64 * 4];
  const unsigned t = threadIdx.x;
  for (unsigned k = 0; k < 4; ++k) buf[0][t * 4 + k] = buf[1][t * 4 + k] = -1.0f;
  __pipeline_memcpy_async(&buf[0][t * 4], src + t * 4, 16);
  __pipeline_commit();
  __pipeline_memcpy_async(&buf[1][t * 4], src + 256 + t * 4, 16, 8);
  __pipeline_commit();
  for (unsigned k = 0; k < 4; ++k) before[t * 4 + k] = buf[0][t * 4 + k];
  __pipeline_wait_prior(1);
  for (unsigned k = 0; k < 4; ++k) {
    first_only[t * 4 + k] = buf[0][t * 4 + k];
    first_only[256 + t * 4 + k] = buf[1][t * 4 + k];
  }
  __pipeline_wait_prior(0);
  for (unsigned k = 0; k < 4; ++k) {
    after[t * 4 + k] = buf[0][t * 4 + k];
    after[256 + t * 4 + k] = buf[1][t * 4 + k];
  }
}

// Thread 0 queues a copy and returns without waiting for it.
__global__ void async_copy_left_pending_kernel(const float* src) {
  __shared__ __align__(16) float buf[4];
  if (threadIdx.x != 0) return;
  __pipeline_memcpy_async(buf, src, 16);
  __pipeline_commit();
}

// One 16 x 8 x 16 tensor-core product, `repeat` times into the same accumulators. Each lane
// gathers its fragments from row-major A [16][16], B [16][8] (k x n) and C [16][8] by the PTX
// ISA's layout, written out here on its own (not kernels/mma.cuh's comment, not the simulator's
// code). Lanes from `lanes` on return first; with `two_sites`, odd lanes call it from a second
// call site.
template <class T>
__global__ void mma_tile_kernel(const unsigned short* a, const unsigned short* b, const float* c,
                                float* d, int repeat, int lanes, bool two_sites) {
  const int lane = static_cast<int>(threadIdx.x), gid = lane / 4, t = lane % 4;
  if (lane >= lanes) return;
  unsigned ra[4], rb[2];
  float acc[4];
  for (int r = 0; r < 4; ++r) {
    const int row = gid + 8 * (r % 2), col = 2 * t + 8 * (r / 2);
    ra[r] = a[row * 16 + col] | static_cast<unsigned>(a[row * 16 + col + 1]) << 16;
  }
  for (int r = 0; r < 2; ++r) {
    const int k = 2 * t + 8 * r;
    rb[r] = b[k * 8 + gid] | static_cast<unsigned>(b[(k + 1) * 8 + gid]) << 16;
  }
  for (int i = 0; i < 4; ++i) acc[i] = c[(gid + 8 * (i / 2)) * 8 + 2 * t + i % 2];
  for (int k = 0; k < repeat; ++k) {
    if (two_sites && lane % 2 == 1) {  // NOLINT(bugprone-branch-clone): the two sites are the test
      cuda::detail::mma_16816<T>(acc, ra, rb);
    } else {
      cuda::detail::mma_16816<T>(acc, ra, rb);
    }
  }
  for (int i = 0; i < 4; ++i) d[(gid + 8 * (i / 2)) * 8 + 2 * t + i % 2] = acc[i];
}

// Four 8 x 8 matrices of 16-bit values, `in` [4][8][8], into shared memory and out again through
// ldmatrix.x4: lane 8j + r names row r of matrix j; out[lane][j] is the lane's register j.
template <bool kTrans>
__global__ void ldmatrix_tile_kernel(const unsigned short* in, unsigned* out) {
  __shared__ __align__(16) unsigned short m[4 * 8 * 8];
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = lane; e < 4 * 8 * 8; e += 32) m[e] = in[e];
  __syncthreads();
  unsigned r[4];
  cuda::detail::ldmatrix_x4<kTrans>(r, &m[(lane / 8) * 64 + (lane % 8) * 8]);
  for (int j = 0; j < 4; ++j) out[lane * 4 + j] = r[j];
}

}  // namespace

void ldmatrix_tile(const unsigned short* in, unsigned* out, bool trans) {
  if (trans) {
    kvheap::launch<ldmatrix_tile_kernel<true>>(dim3(1), dim3(32), 0, nullptr, in, out);
  } else {
    kvheap::launch<ldmatrix_tile_kernel<false>>(dim3(1), dim3(32), 0, nullptr, in, out);
  }
}

void mma_tile(bool bf16, const unsigned short* a, const unsigned short* b, const float* c, float* d,
              int repeat, int lanes, bool two_sites) {
  if (bf16) {
    kvheap::launch<mma_tile_kernel<__nv_bfloat16>>(dim3(1), dim3(32), 0, nullptr, a, b, c, d,
                                                   repeat, lanes, two_sites);
  } else {
    kvheap::launch<mma_tile_kernel<__half>>(dim3(1), dim3(32), 0, nullptr, a, b, c, d, repeat,
                                            lanes, two_sites);
  }
}

void async_copy(const float* src, float* before, float* first_only, float* after) {
  kvheap::launch<async_copy_kernel>(dim3(1), dim3(64), 0, nullptr, src, before, first_only, after);
}

void async_copy_left_pending(const float* src) {
  kvheap::launch<async_copy_left_pending_kernel>(dim3(1), dim3(32), 0, nullptr, src);
}

void block_sum(const long long* values, long long* sums, dim3 grid, dim3 block, WarpReduce how) {
  if (how == WarpReduce::Xor) {
    kvheap::launch<block_sum_kernel<true>>(grid, block, 0, nullptr, values, sums);
  } else {
    kvheap::launch<block_sum_kernel<false>>(grid, block, 0, nullptr, values, sums);
  }
}

void votes(unsigned* ballot, int* any, int* all_true, int* all_even, int* count, dim3 grid,
           dim3 block) {
  kvheap::launch<votes_kernel>(grid, block, 0, nullptr, ballot, any, all_true, all_even, count);
}

void shuffles(int* out_idx, int* out_up, int* out_down, int* out_xor, float* out_half, int src,
              int delta, int lane_mask, int width, int threads) {
  kvheap::launch<shuffles_kernel>(dim3(1), dim3(threads), 0, nullptr, out_idx, out_up, out_down,
                                  out_xor, out_half, src, delta, lane_mask, width);
}

void atomics(int* count, unsigned long long* id_sum, float* float_sum, int* max_id,
             unsigned* cas_count, int* worker_of_block, dim3 grid, dim3 block) {
  kvheap::launch<atomics_kernel>(grid, block, 0, nullptr, count, id_sum, float_sum, max_id,
                                 cas_count, worker_of_block);
}

void static_smem(int* errors, dim3 grid, dim3 block) {
  kvheap::launch<static_smem_kernel>(grid, block, 0, nullptr, errors);
}

void dynamic_smem(int* errors, dim3 grid, dim3 block, unsigned smem_bytes) {
  kvheap::launch<dynamic_smem_kernel>(grid, block, smem_bytes, nullptr, errors);
}

void fill(float* x, float value, int n, dim3 grid, dim3 block, cudaStream_t stream) {
  kvheap::launch<fill_kernel>(grid, block, 0, stream, x, value, n);
}

void write_past_end(float* x, int n, int past_end) {
  kvheap::launch<write_past_end_kernel>(dim3(1), dim3(32), 0, nullptr, x, n, past_end);
  KVHEAP_CUDA_CHECK(cudaDeviceSynchronize());
}

void carried_state(unsigned long long* out, int threads, int rounds) {
  kvheap::launch<carried_state_kernel>(dim3(1), dim3(static_cast<unsigned>(threads)), 0, nullptr,
                                       out, rounds);
}

void sync_in_first_warp_only(int* out) {
  kvheap::launch<sync_in_first_warp_only_kernel>(dim3(1), dim3(64), 0, nullptr, out);
}

void sync_at_two_sites(int* out) {
  kvheap::launch<sync_at_two_sites_kernel>(dim3(1), dim3(64), 0, nullptr, out);
}

void mismatched_syncwarp(int* out) {
  kvheap::launch<mismatched_syncwarp_kernel>(dim3(1), dim3(32), 0, nullptr, out);
}

void syncwarp_without_own_lane(int* out) {
  kvheap::launch<syncwarp_without_own_lane_kernel>(dim3(1), dim3(32), 0, nullptr, out);
}

void set_big_smem_limit(int bytes) {
  KVHEAP_CUDA_CHECK(
      cudaFuncSetAttribute(big_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

void big_smem(int* errors, unsigned smem_bytes) {
  kvheap::launch<big_smem_kernel>(dim3(2), dim3(256), smem_bytes, nullptr, errors);
}

int fill_blocks_per_sm(int threads, unsigned smem_bytes) {
  return kvheap::max_active_blocks<fill_kernel>(threads, smem_bytes);
}

int big_smem_blocks_per_sm(int threads, unsigned smem_bytes) {
  return kvheap::max_active_blocks<big_smem_kernel>(threads, smem_bytes);
}

}  // namespace kvheap::test
