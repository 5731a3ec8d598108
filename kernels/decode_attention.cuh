// The decode-attention kernel body, templated on the cache's row locator; included by the .cu
// file of each layout (decode_attention.cu, paged_attention.cu, shared_prefix_attention.cu).
//
// Work: one block of 4 warps per (batch row i, KV head g, context split s); the block computes
// all query heads of g's group at once, so each K and V row is read from memory once for the
// whole group. (A group above 16 heads, or above 8 at a head_dim over 128, is cut into slices,
// one block each; every slice reads the rows again.)
//
// Memory to shared memory: the context streams through shared memory in tiles of kTile positions
// of K and V, 16 KiB a tile, with the asynchronous copy (cp.async, __pipeline_memcpy_async):
// every thread moves 16-byte vectors, kStages tiles are in flight, and a tile is computed while
// the next two load. A block therefore keeps 32 KiB of loads in flight; four blocks an SM, 128
// KiB. The row's addresses come from its base (contiguous) or from its page table, whose ids are
// staged in shared memory a window of kWindowPages at a time, so the position loop reads no page
// id from global memory. (Windows end on a tile of the split, so that every layout cuts a
// context into the same tiles and computes the same sums: paged output is bitwise contiguous'.)
//
// Shared memory to registers, per warp: a warp holds up to four query heads (kHeadsPerWarp);
// above four, the block's warps split into head groups, each reading the same tiles. A position's
// row is read as 16-byte vectors by a lane group of LP = vectors per row lanes (16 for bf16 at
// head_dim 128), one vector a lane; a warp takes 32 / LP positions a step. Per step each lane
// widens its vector to fp32, multiplies it into its slice of every head's query (scaled by
// 1/sqrt(head_dim) x log2(e), so that scores are in base 2), and the group sums the slices with
// log2(LP) shuffles a head. Every kSubSteps steps the warp takes the new maximum of its scores,
// rescales its running sum and output once, and weighs each position by exp2(score - max); the
// same lanes then read the positions' V vectors and accumulate. The warp's lane groups share the
// maximum, so at the end their sums and outputs just add up; the warps of a head group then
// merge with the log-sum-exp rule of attention_merge.hpp, through shared memory.
//
// Every multiply-add is an explicit fma_rn and every product that feeds an add outside one a
// mul_rn (host_device.hpp), so two instantiations (contiguous, paged) round alike whatever nvcc
// unrolls. Registers, spills and occupancy of every instantiation: docs/results/kernel-resources.md
// (step 3 of scripts/test.sh fails on a spill); the machine code of the loop: the KernelCode tests.
// Split-K (flash-decoding): block s covers positions [n_ctx*s/S, n_ctx*(s+1)/S) and writes its
// state and unnormalised output to the workspace; a second kernel merges the S partials.
#pragma once

#include "device/cuda_compat.hpp"

#include <algorithm>
#include <type_traits>

#include "kernels/attention_merge.hpp"
#include "kernels/block_sum.cuh"
#include "kernels/decode_attention.hpp"
#include "kernels/paged_attention.hpp"

// nvcc must unroll the fixed-trip loops over heads and vector elements so that the per-lane arrays
// live in registers; GCC (the simulator build) would only warn about the pragma.
#if defined(__CUDACC__)
#define KVHEAP_UNROLL _Pragma("unroll")
#else
#define KVHEAP_UNROLL
#endif

namespace kvheap::cuda::detail {

constexpr int kWarps = 4;  // per block: few enough to merge cheaply, and four blocks an SM
constexpr int kThreads = kWarps * 32;
constexpr int kStages = 3;              // tiles in shared memory: one computed, two loading
constexpr int kStageBytes = 16 * 1024;  // K and V of one tile
constexpr int kWindowPages = 512;       // page ids staged in shared memory at a time
constexpr int kMaxTile = 64;            // positions of a tile, at most (bf16 at head_dim 64)
constexpr int kSubSteps = 2;            // warp steps between two softmax rescales
/// The running maximum before any score: finite, so that exp2(score - max) needs no test for an
/// empty start (a masked score, -inf, still weighs 0), and below every real score (a score is
/// finite, and |q.k| of finite fp32 vectors is far below FLT_MAX).
constexpr float kNoScore = -3.402823466e38f;  // -FLT_MAX
/// Blocks an SM should hold, which ptxas is told so that it keeps to 128 registers a thread
/// rather than to a count of its own guessing, below which it spills: the four blocks' stages
/// are 192 KiB of the 228 KiB shared memory of an sm_90 (an sm_80 holds three). The kernel for
/// any head_dim (HD = 0), with its sizes in registers, asks for three (168 registers).
constexpr int min_blocks_per_sm(int hd) { return hd ? 4 : 3; }

/// \brief Shapes and split count the kernel needs, passed by value.
struct KernelDims {
  int n, n_heads, n_kv_heads, head_dim;
  int group;            // query heads per KV head
  int heads_per_block;  // query heads of one block (<= the kernel's G)
  int chunks;           // blocks per (row, KV head)
  int splits;
  float scale;         // 1 / sqrt(head_dim)
  bool keep_partials;  // write raw partials even for one split (a caller merges them further)
};

/// \brief Lanes that share one position: the vectors of a row rounded up to a power of two, at
/// most 32.
KVHEAP_HD constexpr int lanes_per_position(int vectors_per_row) {
  int lp = 1;
  while (lp < vectors_per_row && lp < 32) lp *= 2;
  return lp;
}

/// \brief Largest head_dim a kernel instantiation handles: HD when specialised; for the generic
/// one (HD = 0) 256, or 128 at G = 16.
constexpr int max_head_dim(int hd, int g) { return hd ? hd : g > 8 ? 128 : 256; }

/// \brief The tiling of one instantiation: KV type T, head_dim HD (0: any), G heads per block.
template <class T, int HD, int G>
struct Tiling {
  static constexpr int kMaxHeadDim = max_head_dim(HD, G);
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements of one 16-byte load
  /// positions of a tile: its K and V fill one stage at the largest head_dim
  static constexpr int kTile = kStageBytes / (2 * kMaxHeadDim * static_cast<int>(sizeof(T)));
  static constexpr int kVecsPerLane = (kMaxHeadDim / kVec + 31) / 32;  // above 1: fp32 past 128
  static constexpr int kHeadsPerWarp = std::min(G, 4);
  static constexpr int kWarpsPerGroup = kWarps / (G / kHeadsPerWarp);
  static_assert(kTile >= 8 && kTile <= kMaxTile &&
                kStageBytes % (2 * kMaxHeadDim * sizeof(T)) == 0);
};

/// \brief Bytes of dynamic shared memory of one block: the stages, the byte offsets of their rows
/// (a ring of kStages tiles), and a paged layout's window of page ids. After the tile loop the
/// stages hold the warps' merge (at most [kWarps][4][head_dim + 2] floats, 16.5 KiB).
constexpr std::size_t attention_smem_bytes(bool paged) {
  return static_cast<std::size_t>(kStages) * (kStageBytes + kMaxTile * sizeof(long long)) +
         (paged ? kWindowPages * sizeof(int) : 0);
}

/// \brief True for a locator whose rows have a page table (PagedLocator and those built on it).
template <class Locator>
constexpr bool kPagedRows = requires(const typename Locator::Rows& r) {
  r.page_view();
};

/// \brief Widens one 16-byte vector of the cache to fp32 (exact for every KV dtype).
template <class T>
__device__ __forceinline__ void widen(const uint4& raw, float (&out)[16 / sizeof(T)]) {
  const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (sizeof(T) == 4) {
    KVHEAP_UNROLL
    for (int j = 0; j < 4; ++j) out[j] = __uint_as_float(w[j]);
  } else {
    KVHEAP_UNROLL
    for (int j = 0; j < 4; ++j) {
      if constexpr (std::is_same_v<T, __half>) {  // element 2j sits in the low half-word
        out[2 * j] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[j] & 0xffffu)));
        out[2 * j + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[j] >> 16)));
      } else {  // bf16 is the top half of an fp32
        out[2 * j] = __uint_as_float(w[j] << 16);
        out[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
      }
    }
  }
}

/// \brief A shared-memory address as cp.async takes it: 32 bits on a GPU, computed once, so a
/// copy's destination costs one add; a plain pointer in the simulator.
#if defined(KVHEAP_SIM)
using SharedAddress = char*;
inline SharedAddress shared_address(void* p) { return static_cast<char*>(p); }
#else
using SharedAddress = unsigned;
__device__ __forceinline__ SharedAddress shared_address(void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
#endif

/// \brief Queues a 16-byte asynchronous copy from global `src` to shared `dst` (cp.async.cg: it
/// bypasses L1), landed by the next __pipeline_wait_prior that covers it; with `real` false it
/// reads nothing and writes 16 zero bytes (`src` must still be a valid address).
__device__ __forceinline__ void copy16_async(SharedAddress dst, const void* src, bool real) {
#if defined(KVHEAP_SIM)
  __pipeline_memcpy_async(dst, src, 16, real ? 0 : 16);
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(real ? 16 : 0)
               : "memory");
#endif
}

/// \brief The page ids of one window of a paged row, staged in shared memory, and how a
/// position finds its row there: position t lies `t + offset` positions past the window's first
/// page, so its page is ids[(t + offset) / block_size] and its row within the page the remainder.
struct WindowIndex {
  const int* ids = nullptr;  ///< shared memory: the window's page ids, in logical order
  int offset = 0;            ///< PageView::first less the window's first page's first position
  int block_size = 1;
  int shift = 0;       ///< log2(block_size) where that is a power of two
  int row_bytes = 0;   ///< bytes of one cache row (all KV heads)
  int page_bytes = 0;  ///< block_size * row_bytes

  /// Byte offset of position t's row (t inside the window) in the cache; kPow2: block_size is
  /// 1 << shift. One 32 x 32 -> 64-bit multiply-add: the page's bytes are below 2^31.
  template <bool kPow2>
  __device__ __forceinline__ long long row_offset(int t) const {
    const int lt = t + offset;
    const int page = kPow2 ? lt >> shift : lt / block_size;
    const int in_page = kPow2 ? lt & (block_size - 1) : lt % block_size;
    // unsigned, so that nvcc multiplies 32 x 32 -> 64 bits in one instruction (ids are >= 0)
    return static_cast<long long>(
        static_cast<unsigned long long>(static_cast<unsigned>(ids[page])) *
            static_cast<unsigned>(page_bytes) +
        static_cast<unsigned>(in_page * row_bytes));
  }
};

/// \brief Attention of one (row, KV head, head slice, split) per block; see the file header.
/// HD: head_dim when specialised (64, 128), 0 for any multiple of 8 up to 256. G: query heads
/// per block rounded up to a power of two; unused heads repeat the last real one and are not
/// written.
/// \param q          [n, n_heads, head_dim]
/// \param k_cache    [rows, n_kv_heads, head_dim]
/// \param v_cache    [rows, n_kv_heads, head_dim]
/// \param n_ctx      [n]
/// \param out        [n, n_heads, head_dim], written when splits == 1 (and not keep_partials)
/// \param part_acc   [splits, n, n_heads, head_dim], written otherwise, unnormalised
/// \param part_state [splits, n, n_heads], written otherwise
template <class T, int HD, int G, class Locator>
__global__ void __launch_bounds__(kThreads, min_blocks_per_sm(HD))
    decode_attention_kernel(const float* q, const T* k_cache, const T* v_cache, const int* n_ctx,
                            Locator loc, KernelDims d, float* out, float* part_acc,
                            SoftmaxState* part_state) {
  using Shape = Tiling<T, HD, G>;
  constexpr int E = Shape::kVec;
  constexpr int VPL = Shape::kVecsPerLane;
  constexpr int HW = Shape::kHeadsPerWarp;
  constexpr int WPG = Shape::kWarpsPerGroup;
  constexpr int kTile = Shape::kTile;
  constexpr int kRow = Shape::kMaxHeadDim;  // elements of a tile row in shared memory
  constexpr bool kPaged = kPagedRows<Locator>;
  const int head_dim = HD ? HD : d.head_dim;
  const int vpr = head_dim / E;  // 16-byte vectors a row
  const int lp = lanes_per_position(vpr);
  const int ppw = 32 / lp;                      // positions a warp takes a step
  const int span = WPG * ppw;                   // positions a head group takes a step
  const int steps = (kTile + span - 1) / span;  // steps a tile (a span past it for tiny heads)
  // every step's positions inside the tile: known at compile time for a specialised head_dim
  const bool whole_steps = HD != 0 && kTile % span == 0;

  const int item = static_cast<int>(blockIdx.x);
  const int chunk = item % d.chunks;
  const int g = (item / d.chunks) % d.n_kv_heads;
  const int i = item / (d.chunks * d.n_kv_heads);
  const int split = static_cast<int>(blockIdx.y);
  const int head0 = g * d.group + chunk * d.heads_per_block;
  int heads = min(d.heads_per_block, d.group - chunk * d.heads_per_block);
  // A locator may say that only a row's first heads_of(i) heads of each group are real (chapter
  // 4's wide rows are padded to the widest group): a slice of padding only returns, before any
  // barrier, so the block reads nothing.
  if constexpr (requires { loc.heads_of(0); }) {
    heads = min(heads, loc.heads_of(i) - chunk * d.heads_per_block);
    if (heads <= 0) return;
  }
  const int ctx = n_ctx[i];
  const int t0 = static_cast<int>(static_cast<long long>(ctx) * split / d.splits);
  const int t1 = static_cast<int>(static_cast<long long>(ctx) * (split + 1) / d.splits);

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int sub = lane / lp;  // which of the warp's positions
  const int sl = lane % lp;   // lane within the lane group
  const int hg = warp / WPG;  // the warp's head group: block heads hg * HW .. hg * HW + HW - 1
  const int wi = warp % WPG;  // the warp's place in its group

  // This lane's slices of its heads' queries, in base-2 score units, and of their outputs.
  const float q_scale = mul_rn(d.scale, 1.44269504088896341f);  // log2(e)
  float qv[HW][VPL][E];
  float acc[HW][VPL][E];
  float m[HW], l[HW];
  KVHEAP_UNROLL
  for (int h = 0; h < HW; ++h) {
    const float* qh =
        q +
        (static_cast<long long>(i) * d.n_heads + head0 + min(hg * HW + h, heads - 1)) * head_dim;
    m[h] = kNoScore;
    l[h] = 0.0f;
    KVHEAP_UNROLL
    for (int v = 0; v < VPL; ++v) {
      const int vec = sl + v * lp;
      KVHEAP_UNROLL
      for (int e = 0; e < E; e += 4) {
        const float4 f = vec < vpr ? *reinterpret_cast<const float4*>(qh + vec * E + e)
                                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        qv[h][v][e] = mul_rn(f.x, q_scale);
        qv[h][v][e + 1] = mul_rn(f.y, q_scale);
        qv[h][v][e + 2] = mul_rn(f.z, q_scale);
        qv[h][v][e + 3] = mul_rn(f.w, q_scale);
      }
      KVHEAP_UNROLL
      for (int e = 0; e < E; ++e) acc[h][v][e] = 0.0f;
    }
  }

  using Rows = decltype(loc.rows_of(0));
  Rows rows{};
  if (t0 < t1) rows = loc.rows_of(i);
  const int row_bytes = d.n_kv_heads * head_dim * static_cast<int>(sizeof(T));  // a cache row
  const char* k_head =
      reinterpret_cast<const char*>(k_cache + static_cast<long long>(g) * head_dim);
  const char* v_head =
      reinterpret_cast<const char*>(v_cache + static_cast<long long>(g) * head_dim);
  T* stages = dynamic_smem<T>();  // [kStages][K, V][kTile][kRow]
  // [kStages][kTile]: byte offsets in the cache of the rows of the tile each stage receives
  long long* ring = reinterpret_cast<long long*>(stages + kStages * 2 * kTile * kRow);
  int* window = reinterpret_cast<int*>(ring + kStages * kMaxTile);  // [kWindowPages], paged only

  // Where the rows of tile [ts, ts + kTile) are, into ring slot s: thread p finds position
  // ts + p's row once (its page id from the window, for a paged row), for all the threads that
  // copy a vector of it. A position from w1 on gets the last real position's row (never read).
  // kPow2 (an std::bool_constant): a paged row's block size is a power of two.
  auto plan = [&](auto pow2, int ts, int w1, int s, const WindowIndex& wx) {
    if (tid < kTile) {
      const int t = min(ts + tid, w1 - 1);
      long long row;
      if constexpr (kPaged) {
        row = wx.template row_offset<decltype(pow2)::value>(t);
      } else {
        row = rows.at(t) * row_bytes;
      }
      ring[s * kTile + tid] = row;
    }
  };
  // Queues the copies of vector `vec` of tile position p (position ts + p) into stage s, K and
  // V from the row its ring slot names; a position from w1 on gets zeros.
  SharedAddress stage0 = shared_address(stages);
#if !defined(KVHEAP_SIM)
  // An opaque move: ptxas would otherwise recompute the shared window's base (S2UR, ULEA) in
  // every tile of the paged loop, where the page ids keep more values live: 9 instructions a tile.
  asm volatile("" : "+r"(stage0));
#endif
  auto copy = [&](int ts, int w1, int s, int p, int vec) {
    const long long row = ring[s * kTile + p];
    const bool real = ts + p < w1;
    const SharedAddress dst =
        stage0 + static_cast<int>((((s * 2) * kTile + p) * kRow + vec * E) * sizeof(T));
    // (head + column) + row: the first sum is the same for every tile, and computed once
    copy16_async(dst, (k_head + vec * 16) + row, real);
    copy16_async(dst + static_cast<int>(kTile * kRow * sizeof(T)), (v_head + vec * 16) + row, real);
  };
  // Queues tile [ts, ts + kTile) into stage s. Where a row's vectors divide the block's threads
  // (every head_dim but odd multiples of 8 below 128), each thread keeps one vector of every
  // (kThreads / vpr)-th position: its column of the tile, the same for every tile.
  auto issue = [&](int ts, int w1, int s) {
    if (kThreads % vpr == 0) {  // a constant for a specialised head_dim
      const int stride = kThreads / vpr;
      const int per_thread = (kTile + stride - 1) / stride;  // 4 for bf16 at head_dim 128
      const bool whole = kTile % stride == 0;  // every thread's positions inside the tile
      KVHEAP_UNROLL
      for (int j = 0; j < per_thread; ++j) {
        const int p = tid / vpr + j * stride;
        if (whole || p < kTile) copy(ts, w1, s, p, tid % vpr);
      }
    } else {
      for (int c = tid; c < kTile * vpr; c += kThreads) copy(ts, w1, s, c / vpr, c % vpr);
    }
  };

  // The scores of one step: this lane group's position p of the tile in stage s, every head.
  auto scores = [&](const T* ks, int p, float(&dot)[HW]) {
    KVHEAP_UNROLL
    for (int h = 0; h < HW; ++h) dot[h] = 0.0f;
    KVHEAP_UNROLL
    for (int v = 0; v < VPL; ++v) {
      const int vec = sl + v * lp;
      if (vec >= vpr || !(whole_steps || p < kTile)) continue;
      float kf[E];
      widen<T>(*reinterpret_cast<const uint4*>(ks + p * kRow + vec * E), kf);
      KVHEAP_UNROLL
      for (int h = 0; h < HW; ++h) KVHEAP_UNROLL
      for (int e = 0; e < E; ++e) dot[h] = fma_rn(qv[h][v][e], kf[e], dot[h]);
    }
    for (int off = lp / 2; off > 0; off /= 2) KVHEAP_UNROLL
    for (int h = 0; h < HW; ++h) dot[h] += __shfl_xor_sync(kFullMask, dot[h], off);
  };

  // One tile: its steps in runs of kSubSteps, each run one rescale of the running sums.
  auto compute = [&](int ts, int w1, int s) {
    const T* ks = stages + (s * 2) * kTile * kRow;
    const T* vs = ks + kTile * kRow;
    KVHEAP_UNROLL
    for (int s0 = 0; s0 < steps; s0 += kSubSteps) {
      float w[kSubSteps][HW];  // the run's scores, then their weights
      KVHEAP_UNROLL
      for (int j = 0; j < kSubSteps; ++j) {
        const int p = (s0 + j) * span + wi * ppw + sub;
        float dot[HW] = {};
        if (s0 + j < steps) {  // warp-uniform: every lane reaches the shuffles
          scores(ks, p, dot);
        }
        const bool valid = s0 + j < steps && (whole_steps || p < kTile) && ts + p < w1;
        KVHEAP_UNROLL
        for (int h = 0; h < HW; ++h) w[j][h] = valid ? dot[h] : -INFINITY;
      }
      KVHEAP_UNROLL
      for (int h = 0; h < HW; ++h) {
        float top = w[0][h];
        KVHEAP_UNROLL
        for (int j = 1; j < kSubSteps; ++j) top = fmaxf(top, w[j][h]);
        for (int off = lp; off < 32; off *= 2)
          top = fmaxf(top, __shfl_xor_sync(kFullMask, top, off));
        if (top > m[h]) {  // warp-uniform: the same in every lane of the warp
          const float alpha = exp2_ftz(m[h] - top);  // 0 for the first scores (m = kNoScore)
          l[h] = mul_rn(l[h], alpha);
          KVHEAP_UNROLL
          for (int v = 0; v < VPL; ++v) KVHEAP_UNROLL
          for (int e = 0; e < E; ++e) acc[h][v][e] = mul_rn(acc[h][v][e], alpha);
          m[h] = top;
        }
        KVHEAP_UNROLL
        for (int j = 0; j < kSubSteps; ++j) {  // a masked score (-inf) weighs exp2(-inf) = 0
          w[j][h] = exp2_ftz(w[j][h] - m[h]);
          l[h] += w[j][h];
        }
      }
      KVHEAP_UNROLL
      for (int j = 0; j < kSubSteps; ++j) {
        const int p = (s0 + j) * span + wi * ppw + sub;
        if (s0 + j >= steps || p >= kTile) continue;
        KVHEAP_UNROLL
        for (int v = 0; v < VPL; ++v) {
          const int vec = sl + v * lp;
          if (vec >= vpr) continue;
          float vf[E];  // a zero-filled row past the context weighs 0
          widen<T>(*reinterpret_cast<const uint4*>(vs + p * kRow + vec * E), vf);
          KVHEAP_UNROLL
          for (int h = 0; h < HW; ++h) KVHEAP_UNROLL
          for (int e = 0; e < E; ++e) acc[h][v][e] = fma_rn(w[j][h], vf[e], acc[h][v][e]);
        }
      }
    }
  };

  // The tiles of window [w0, w1) through the pipeline. Tile n's rows are planned into ring slot
  // n % kStages at least one barrier before its copies are queued (at step n - kStages + 1): at
  // the start for the first kStages tiles, else at step n - kStages, after that step's barrier.
  // The slot's last reader, the copies of tile n - kStages, ran at step n - 2 kStages + 1, a
  // barrier or more before.
  auto run_window = [&](auto pow2, int w0, int w1, const WindowIndex& wx) {
    const int tiles = (w1 - w0 + kTile - 1) / kTile;
    KVHEAP_UNROLL
    for (int k = 0; k < kStages; ++k) {
      if (k < tiles) plan(pow2, w0 + k * kTile, w1, k, wx);
    }
    __syncthreads();  // the first tiles' rows are planned
    KVHEAP_UNROLL
    for (int k = 0; k + 1 < kStages; ++k) {
      if (k < tiles) issue(w0 + k * kTile, w1, k);
      __pipeline_commit();
    }
    for (int k = 0; k < tiles; ++k) {
      __pipeline_wait_prior(kStages - 2);  // this thread's copies of tile k have landed
      __syncthreads();                     // everyone's have, and tile k - 1's stage is free again
      const int next = k + kStages - 1;
      if (next < tiles) issue(w0 + next * kTile, w1, next % kStages);
      if (next + 1 < tiles) plan(pow2, w0 + (next + 1) * kTile, w1, (next + 1) % kStages, wx);
      __pipeline_commit();
      compute(w0 + k * kTile, w1, k % kStages);
    }
    __pipeline_wait_prior(0);  // only empty batches are left, but every copy is waited for
  };

  // The split, a window of page ids at a time (one window for a contiguous row). A window ends
  // on a tile boundary of the split. A paged row's loop comes in two copies, for a block size
  // that is a power of two (shifts) and one that is not (divisions), chosen once per window.
  for (int w0 = t0; w0 < t1;) {
    int w1 = t1;
    if constexpr (kPaged) {
      const PageView pv = rows.page_view();
      const int first_page = (w0 + pv.first) / pv.block_size;
      const int last = min(first_page + kWindowPages, (t1 - 1 + pv.first) / pv.block_size + 1);
      const int end = last * pv.block_size - pv.first;  // the window's pages end here
      if (end < t1) w1 = w0 + (end - w0) / kTile * kTile;
      __syncthreads();  // the last window's tiles are done
      for (int k = tid; k < last - first_page; k += kThreads) window[k] = pv.pages[first_page + k];
      __syncthreads();
      const WindowIndex wx{window,        pv.first - first_page * pv.block_size,
                           pv.block_size, __popc(pv.block_size - 1),
                           row_bytes,     pv.block_size * row_bytes};
      if ((pv.block_size & (pv.block_size - 1)) == 0) {
        run_window(std::true_type{}, w0, w1, wx);
      } else {
        run_window(std::false_type{}, w0, w1, wx);
      }
    } else {
      run_window(std::true_type{}, w0, w1, WindowIndex{});
    }
    w0 = w1;
  }

  // 1. Maxima back to natural-log units (the merges, here and split-K's, are in base e), and to
  // -inf for a warp that saw no position; then the lane groups of a warp, which share its maxima:
  // their sums and outputs add up.
  KVHEAP_UNROLL
  for (int h = 0; h < HW; ++h)
    m[h] = m[h] == kNoScore ? -INFINITY : mul_rn(m[h], 0.693147180559945309f);  // ln 2
  for (int off = lp; off < 32; off *= 2) {
    KVHEAP_UNROLL
    for (int h = 0; h < HW; ++h) {
      l[h] += __shfl_xor_sync(kFullMask, l[h], off);
      KVHEAP_UNROLL
      for (int v = 0; v < VPL; ++v) KVHEAP_UNROLL
      for (int e = 0; e < E; ++e) acc[h][v][e] += __shfl_xor_sync(kFullMask, acc[h][v][e], off);
    }
  }

  // 2. The warps of a head group, through shared memory (the stages, free now): the others write
  // their states and outputs, [kWarps][HW][head_dim + 2], and the group's first warp merges them.
  __syncthreads();
  float* merge = reinterpret_cast<float*>(stages);
  const auto slot_of = [&](int w, int h) {
    return merge + (static_cast<long long>(w) * HW + h) * (head_dim + 2);
  };
  if (wi > 0 && sub == 0) {
    KVHEAP_UNROLL
    for (int h = 0; h < HW; ++h) {
      float* dst = slot_of(warp, h);
      if (sl == 0) {
        dst[head_dim] = m[h];
        dst[head_dim + 1] = l[h];
      }
      KVHEAP_UNROLL
      for (int v = 0; v < VPL; ++v) {
        const int vec = sl + v * lp;
        if (vec >= vpr) continue;
        KVHEAP_UNROLL
        for (int e = 0; e < E; ++e) dst[vec * E + e] = acc[h][v][e];
      }
    }
  }
  __syncthreads();
  if (wi != 0 || sub != 0) return;
  for (int other = 1; other < WPG; ++other) {
    KVHEAP_UNROLL
    for (int h = 0; h < HW; ++h) {
      const float* src = slot_of(warp + other, h);
      const MergeScales sc =
          merge_softmax(SoftmaxState{m[h], l[h]}, SoftmaxState{src[head_dim], src[head_dim + 1]});
      KVHEAP_UNROLL
      for (int v = 0; v < VPL; ++v) {
        const int vec = sl + v * lp;
        KVHEAP_UNROLL
        for (int e = 0; e < E; ++e) {
          const float theirs = vec < vpr ? src[vec * E + e] : 0.0f;
          acc[h][v][e] = fma_rn(theirs, sc.b, mul_rn(acc[h][v][e], sc.a));
        }
      }
      m[h] = sc.out.max;
      l[h] = sc.out.sum;
    }
  }

  // 3. The first lane group of each head group's first warp holds its heads' results.
  KVHEAP_UNROLL
  for (int h = 0; h < HW; ++h) {
    const int bh = hg * HW + h;  // head of the block
    if (bh >= heads) break;
    const long long head_row = static_cast<long long>(i) * d.n_heads + head0 + bh;
    const long long part_row = static_cast<long long>(split) * d.n * d.n_heads + head_row;
    const bool final = d.splits == 1 && !d.keep_partials;
    float* dst = final ? out + head_row * head_dim : part_acc + part_row * head_dim;
    // Single pass: normalise now (an empty context, l = 0, gives zeros). Split: keep it raw.
    const float scale = final ? (l[h] > 0.0f ? 1.0f / l[h] : 0.0f) : 1.0f;
    KVHEAP_UNROLL
    for (int v = 0; v < VPL; ++v) {
      const int vec = sl + v * lp;
      if (vec >= vpr) continue;
      KVHEAP_UNROLL
      for (int e = 0; e < E; e += 4)
        *reinterpret_cast<float4*>(dst + vec * E + e) =
            make_float4(acc[h][v][e] * scale, acc[h][v][e + 1] * scale, acc[h][v][e + 2] * scale,
                        acc[h][v][e + 3] * scale);
    }
    if (!final && sl == 0) part_state[part_row] = SoftmaxState{m[h], l[h]};
  }
}

}  // namespace kvheap::cuda::detail
